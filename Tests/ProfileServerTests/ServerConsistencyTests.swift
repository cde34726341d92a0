import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Pipelining, read-after-write across connections, crash and shutdown durability.
@Suite struct ServerConsistencyTests {
    /// Writes past what the write buffer holds wait for merges to make room: with a buffer
    /// a few batches fill, every write is still acknowledged, in order, and read back.
    @Test func writesBeyondTheWriteBufferWaitForMergesAndAllGoIn() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let server = try InProcessServer(path: directory + "/p.db", busyTimeoutMilliseconds: 5000,
                                         writeBufferBytes: 64 << 10)
        let c = try server.connect()
        for batch in 0..<20 {
            let profiles = (0..<100).map { Profile(userId: "p\(batch)-\($0)", name: "name \($0)", portraitUri: "u") }
            #expect(try c.mset(profiles) == profiles.count)
        }
        #expect(try c.count() == 2000)
        #expect(try c.get(Array("p19-99".utf8))?.name == Array("name 99".utf8))
        server.stop()
    }

    /// UPDATE reads the profile's other field from the cached reply line (escapes and all)
    /// or, when the cache does not hold it, from the table; either way the field it does not
    /// name comes back byte for byte.
    @Test func partialUpdateKeepsTheOtherFieldFromCacheAndFromTable() throws {
        let name = Array("Zoë \"the\" Li\t小明 😀".utf8)
        let uri = Array("https://cdn.example/a b/\\x".utf8)
        do {
            let server = try TestServer()
            let c = try server.connect()
            try c.set(Profile(userId: Array("in cache".utf8), name: name, portraitUri: uri))
            #expect(try c.update(Array("in cache".utf8), portraitUri: Array("u2".utf8)))
            #expect(try c.get(Array("in cache".utf8)).map { [$0.name, $0.portraitUri] } == [name, Array("u2".utf8)])
            #expect(try c.update(Array("in cache".utf8), name: Array("n2".utf8)))
            #expect(try c.get(Array("in cache".utf8)).map { [$0.name, $0.portraitUri] } == [Array("n2".utf8), Array("u2".utf8)])
        }
        // Restarted, the cache is empty: the current profile comes from the table.
        let server = try TestServer()
        let c = try server.connect()
        try c.set(Profile(userId: Array("in table".utf8), name: name, portraitUri: uri))
        #expect(exitCode(server.stop()) == 0)
        try server.start()
        let again = try server.connect()
        #expect(try again.update(Array("in table".utf8), portraitUri: Array("u3".utf8)))
        #expect(try again.get(Array("in table".utf8)).map { [$0.name, $0.portraitUri] } == [name, Array("u3".utf8)])
        #expect(try !again.update(Array("nobody".utf8), name: Array("x".utf8)))
    }

    /// Writes commit to the write log and reach the table later; COUNT, RECENT, SCAN and STATS
    /// read the write buffer with the table, so they see every write acknowledged before them
    /// at once, without waiting for a merge.
    @Test func tableReadsSeeEveryAcknowledgedWriteAtOnce() throws {
        let server = try TestServer()
        let writer = try server.connect()
        let reader = try server.connect()
        var total = 0
        for round in 0..<5 {
            for part in 0..<2 {
                let batch = (part * 1000..<(part + 1) * 1000).map { Profile(userId: "r\(round)-\($0)", name: "n", portraitUri: "p") }
                #expect(try writer.mset(batch) == batch.count)
                total += batch.count
            }
            #expect(try writer.del(Array("r\(round)-0".utf8)))
            total -= 1
            try writer.set(Profile(userId: "newest-\(round)", name: "n", portraitUri: "p"))
            total += 1
            #expect(try reader.count() == total)
            #expect(try reader.recent(1).map { String(decoding: $0.userId, as: UTF8.self) } == ["newest-\(round)"])
            #expect(try reader.scan(after: Array("newest-\(round)".utf8), limit: 1)
                .map { String(decoding: $0.userId, as: UTF8.self) } == ["r0-1"])
            #expect(try reader.stats().first { $0.name == "store_rows" }?.value == "\(total)")
        }
        try writer.flushAll()
        #expect(try reader.count() == 0)
    }

    @Test func twentyThousandPipelinedRequestsAnswerInOrder() throws {
        let server = try TestServer()
        let c = try server.connect()
        try c.mset((0..<100).map { Profile(userId: "u\($0)", name: "name \($0)", portraitUri: "p\($0)") })
        // Reads, writes and errors mixed in one burst; every reply must line up with its request.
        var expected: [String] = []
        var text = ""
        for i in 0..<20_000 {
            switch i % 5 {
            case 0:
                text += "GET u\(i % 100)\n"
                expected.append("VALUE u\(i % 100) \"name \(i % 100)\" p\(i % 100)")
            case 1:
                text += "SET w\(i) n\(i) p\n"
                expected.append("STORED")
            case 2:
                text += "GET w\(i - 1)\n"
                expected.append("VALUE w\(i - 1) n\(i - 1) p")
            case 3:
                text += "EXISTS nobody\(i)\n"
                expected.append("NO")
            default:
                text += "NOPE\n"
                expected.append("ERROR UNKNOWN unknown command 'NOPE'")
            }
        }
        c.sendRaw(Array(text.utf8))
        // Read while writing would be nicer for memory, but the server must cope either way.
        try c.flush()
        for (i, want) in expected.enumerated() {
            let got = try c.line()
            if got != want {
                Issue.record("reply \(i): got \(got), want \(want)")
                return
            }
        }
    }

    @Test func aReadNeverSeesAnythingOlderThanAnAcknowledgedWrite() throws {
        let server = try TestServer(["--threads", "2"])
        let writer = try server.connect()
        let readers = try (0..<4).map { _ in try server.connect() }
        for round in 0..<300 {
            let id = Array("hot\(round % 7)".utf8)
            // Warm every reader's view first so a stale cached value would show.
            for r in readers { _ = try r.get(id) }
            let name = Array("v\(round)".utf8)
            if round % 10 == 9 {
                _ = try writer.del(id)
                for r in readers { #expect(try r.get(id) == nil, "round \(round)") }
            } else {
                try writer.set(Profile(userId: id, name: name, portraitUri: []))
                for r in readers { #expect(try r.get(id)?.name == name, "round \(round)") }
            }
        }
    }

    @Test func killNineAfterAcknowledgedWritesLosesNothing() throws {
        let server = try TestServer()
        let clients = try (0..<4).map { _ in try server.connect() }
        var acknowledged: [String: String] = [:]
        for i in 0..<400 {
            let c = clients[i % clients.count]
            let id = "k\(i % 150)"
            switch i % 4 {
            case 0, 1:
                try c.set(Profile(userId: id, name: "n\(i)", portraitUri: "u\(i)"))
                acknowledged[id] = "n\(i)"
            case 2:
                let batch = (0..<5).map { Profile(userId: "m\(i)-\($0)", name: "b\(i)", portraitUri: "") }
                #expect(try c.mset(batch) == 5)
                for p in batch { acknowledged[String(decoding: p.userId, as: UTF8.self)] = "b\(i)" }
            default:
                if try c.update(Array(id.utf8), name: Array("up\(i)".utf8)) { acknowledged[id] = "up\(i)" }
            }
        }
        #expect(try clients[0].del(Array("k0".utf8)))
        acknowledged["k0"] = nil
        let status = server.stop(signal: SIGKILL)
        #expect(exitCode(status) == -SIGKILL)

        try server.start()
        let c = try server.connect()
        #expect(try c.count() == acknowledged.count)
        for (id, name) in acknowledged {
            #expect(try c.get(Array(id.utf8))?.name == Array(name.utf8), "\(id)")
        }
        #expect(try c.get(Array("k0".utf8)) == nil)
    }

    @Test func sigtermAnswersInFlightCommitsAndExitsZero() throws {
        let server = try TestServer()
        let c = try server.connect()
        var text = ""
        for i in 0..<2000 { text += "SET s\(i) n\(i) u\n" }
        c.sendRaw(Array(text.utf8))
        try c.flush()
        #expect(try c.line() == "STORED")
        let status = server.stop(signal: SIGTERM)
        #expect(exitCode(status) == 0)
        // Everything that was answered before the close is in the store.
        var answered = 1
        while answered < 2000, let line = try? c.line() {
            #expect(line == "STORED")
            answered += 1
        }
        #expect(server.log.contains("msg=stopped"))
        try server.start()
        let d = try server.connect()
        #expect(try d.count() >= answered)
        for i in 0..<answered { #expect(try d.exists(Array("s\(i)".utf8)), "s\(i)") }
        // The WAL was checkpointed into the main file at shutdown.
        server.stop()
    }

    @Test func recentOrderSurvivesARestart() throws {
        let server = try TestServer()
        let c = try server.connect()
        for i in 0..<5 { try c.set(Profile(userId: "r\(i)", name: "n", portraitUri: "")) }
        #expect(try c.update(Array("r1".utf8), name: Array("x".utf8)))
        #expect(exitCode(server.stop()) == 0)
        try server.start()
        let d = try server.connect()
        #expect(try d.recent(3).map { String(decoding: $0.userId, as: UTF8.self) } == ["r1", "r4", "r3"])
        try d.set(Profile(userId: "r0", name: "n", portraitUri: ""))
        #expect(try d.recent(2).map { String(decoding: $0.userId, as: UTF8.self) } == ["r0", "r1"])
    }
}
