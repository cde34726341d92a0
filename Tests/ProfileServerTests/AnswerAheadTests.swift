import CSQLite
import Glibc
import ProfileClient
@testable import ProfileServer
import ProfileStore
@_spi(Testing) import ProfileStoreSQLite
import ProfileTestSupport
import Testing

/// Reads pipelined behind a connection's writes: a GET or EXISTS (over RESP, a key read or
/// EXISTS) of ids those writes do not touch is answered without waiting for their commit, its
/// reply sent after theirs; a read of a written id, and every other request, waits for the
/// commit.
@Suite struct AnswerAheadTests {
    @Test func aReadOfAnotherIdIsAnsweredWhileTheWriteBeforeItWaitsToCommit() throws {
        try withHeldCommits { server, gate in
            let client = try server.connect()
            #expect(try client.roundTrip("SET b bee bu\n") == "STORED")
            let looked = server.statistic("cmd_get")!

            gate.hold()
            client.sendRaw(Array("SET a ay au\nGET b\nEXISTS b\n".utf8))
            try client.flush()
            // Both reads are served while the SET's commit is held.
            #expect(waitUntil { server.statistic("cmd_get")! == looked + 2 })
            #expect(waitUntil { gate.waiting })
            gate.release()
            #expect(try client.line() == "STORED")
            #expect(try client.line() == "VALUE b bee bu")
            #expect(try client.line() == "YES")
        }
    }

    @Test func aReadOfAWrittenIdWaitsForTheWriteAndSeesIt() throws {
        try withHeldCommits { server, gate in
            let client = try server.connect()
            #expect(try client.roundTrip("SET a old ou\n") == "STORED")
            #expect(try client.roundTrip("SET b bee bu\n") == "STORED")
            let looked = server.statistic("cmd_get")!

            gate.hold()
            // GET a names the id the SET writes; GET b, behind it, waits in line too.
            client.sendRaw(Array("SET a new nu\nGET a\nGET b\n".utf8))
            try client.flush()
            #expect(waitUntil { gate.waiting })
            usleep(50_000)
            #expect(server.statistic("cmd_get")! == looked)
            gate.release()
            #expect(try client.line() == "STORED")
            #expect(try client.line() == "VALUE a new nu")
            #expect(try client.line() == "VALUE b bee bu")
        }
    }

    @Test func repliesKeepRequestOrderAcrossWritesAndReadsAnsweredAhead() throws {
        try withHeldCommits { server, gate in
            let client = try server.connect()
            #expect(try client.roundTrip("SET b bee bu\n") == "STORED")
            gate.hold()
            client.sendRaw(Array("""
                SET a ay au
                GET b
                SET c cee cu
                GET b
                GET c
                DEL b
                EXISTS b
                GET zz
                GET
                COUNT
                FLUSHALL
                GET a

                """.utf8))
            try client.flush()
            #expect(waitUntil { gate.waiting })
            gate.release()
            let expected = ["STORED", "VALUE b bee bu", "STORED", "VALUE b bee bu", "VALUE c cee cu", "DELETED",
                            "NO", "NOTFOUND zz", "ERROR ARGS", "COUNT 2", "OK", "NOTFOUND a"]
            for line in expected {
                // A malformed read behind the writes gets its error in its place.
                let got = try client.line()
                #expect(line == "ERROR ARGS" ? got.hasPrefix(line) : got == line, "\(got)")
            }
        }
    }

    @Test func aFailedWriteStillSendsTheReadsAnsweredAheadOfIt() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let server = try InProcessServer(path: directory + "/profiles.sqlite3")
        defer { server.stop() }
        let client = try server.connect()
        #expect(try client.roundTrip("SET b bee bu\n") == "STORED")
        server.store.setFault(SQLITE_FULL)
        client.sendRaw(Array("SET a ay au\nGET b\n".utf8))
        try client.flush()
        #expect(try client.line().hasPrefix("ERROR STORE"))
        #expect(try client.line() == "VALUE b bee bu")
        server.store.setFault(nil)
        #expect(try client.roundTrip("GET a\n") == "NOTFOUND a")
    }

    @Test func respKeyReadsOfOtherKeysAreAnsweredWhileTheWriteBeforeThemWaits() throws {
        try withHeldCommits { server, gate in
            let client = try server.connectRESP()
            #expect(try client.call("HSET", "b", "name", "bee", "portraitUri", "bu") == ":2\r\n")
            let looked = server.statistic("cmd_get")!

            gate.hold()
            client.send(RESPTestClient.multibulk(["HSET", "a", "name", "ay"]) + RESPTestClient.multibulk(["HGET", "b", "name"])
                        + RESPTestClient.multibulk(["HGETALL", "b"]) + RESPTestClient.multibulk(["EXISTS", "b", "zz"]))
            // The three reads (four keys) are served while the HSET's commit is held.
            #expect(waitUntil { server.statistic("cmd_get")! == looked + 4 })
            #expect(waitUntil { gate.waiting })
            gate.release()
            #expect(try client.reply() == ":1\r\n")
            #expect(try client.reply() == "$3\r\nbee\r\n")
            #expect(try client.reply() == "*4\r\n$4\r\nname\r\n$3\r\nbee\r\n$11\r\nportraitUri\r\n$2\r\nbu\r\n")
            #expect(try client.reply() == ":1\r\n")
        }
    }

    @Test func respReadsOfAWrittenKeyWaitAndRepliesKeepRequestOrder() throws {
        try withHeldCommits { server, gate in
            let client = try server.connectRESP()
            #expect(try client.call("HSET", "a", "name", "old") == ":1\r\n")
            #expect(try client.call("HSET", "b", "name", "bee") == ":1\r\n")
            let looked = server.statistic("cmd_get")!

            gate.hold()
            // EXISTS names a written key among others; the HGET of b behind it waits in line too.
            let requests: [[String]] = [["HSET", "a", "name", "new"], ["EXISTS", "zz", "a"], ["HGET", "b", "name"]]
            client.send(requests.flatMap { RESPTestClient.multibulk($0) })
            #expect(waitUntil { gate.waiting })
            usleep(50_000)
            #expect(server.statistic("cmd_get")! == looked)
            // More writes and reads behind them, answered in request order.
            let more: [[String]] = [["HGET", "b", "nickname"], ["DEL", "b"], ["HGET", "b", "name"], ["HGET", "zz", "name"],
                                    ["DBSIZE"], ["FLUSHALL"], ["HGET", "a", "name"]]
            client.send(more.flatMap { RESPTestClient.multibulk($0) })
            gate.release()
            let expected = [":0\r\n", ":1\r\n", "$3\r\nbee\r\n", "-ERR", ":1\r\n", "$-1\r\n", "$-1\r\n", ":1\r\n",
                            "+OK\r\n", "$-1\r\n"]
            for reply in expected {
                // An unknown field gets its error in its place.
                let got = try client.reply()
                #expect(reply == "-ERR" ? got.hasPrefix(reply) : got == reply, "\(got)")
            }
        }
    }

    @Test func aKeyPrefixDoesNotHideAWrittenKeyFromTheReadsBehindIt() throws {
        try withHeldCommits(respKeyPrefix: "user:") { server, gate in
            let client = try server.connectRESP()
            #expect(try client.call("HSET", "user:a", "name", "old") == ":1\r\n")
            #expect(try client.call("HGET", "user:a", "name") == "$3\r\nold\r\n")
            let looked = server.statistic("cmd_get")!

            gate.hold()
            client.send(RESPTestClient.multibulk(["HSET", "user:a", "name", "new"]) + RESPTestClient.multibulk(["HGET", "user:a", "name"]))
            #expect(waitUntil { gate.waiting })
            usleep(50_000)
            // The write's id is the key without its prefix: the read of that key waits for it.
            #expect(server.statistic("cmd_get")! == looked)
            gate.release()
            #expect(try client.reply() == ":0\r\n")
            #expect(try client.reply() == "$3\r\nnew\r\n")
        }
    }

    /// Runs `body` against an in-process server whose commits the test can hold back.
    private func withHeldCommits(respKeyPrefix: String = "", _ body: (InProcessServer, CommitGate) throws -> Void) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let gate = CommitGate()
        let server = try InProcessServer(path: directory + "/profiles.sqlite3", respKeyPrefix: respKeyPrefix,
                                         wrapWritePath: { gate.wrap($0) })
        defer {
            gate.release()
            server.stop()
        }
        try body(server, gate)
    }

    private func waitUntil(_ condition: () -> Bool) -> Bool {
        for _ in 0..<2000 {
            if condition() { return true }
            usleep(1000)
        }
        return condition()
    }
}

/// Holds commits back while the test says so: a held commit waits at the gate before it
/// starts. Any thread.
final class CommitGate: @unchecked Sendable {
    private let state = Locked((held: false, waiting: false))

    func hold() { state.withLock { $0.held = true } }
    func release() { state.withLock { $0.held = false } }
    /// Whether a commit is waiting at the gate now.
    var waiting: Bool { state.withLock { $0.waiting } }

    /// Commits go through the writer thread, where the gate holds them.
    func wrap(_ path: any ProfileWritePath) -> any ProfileWritePath {
        InterposedWritePath(path, beforeCommit: { self.pass() }, isPrompt: { false })
    }

    private func pass() {
        while state.withLock({ state in
            state.waiting = state.held
            return state.held
        }) {
            usleep(1000)
        }
    }
}
