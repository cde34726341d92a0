import ProfileTestSupport
import Glibc
import ProfileClient
import Testing
@testable import ProfileServer

/// The RESP front over the wire (docs/RESP.md): what the contract promises beyond what a Redis
/// client or a comparison with redis-server can show.
@Suite struct RESPFrontTests {
    @Test func aWriteThroughEitherFrontIsSeenThroughTheOther() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        let line = try server.connect()
        #expect(try resp.call("HSET", "42", "name", "Fran Li", "portraitUri", "https://x/42.png") == ":2\r\n")
        #expect(try line.roundTrip("GET 42\n") == #"VALUE 42 "Fran Li" https://x/42.png"#)
        #expect(try line.roundTrip("SET 7 Li \"\"\n") == "STORED")
        #expect(try resp.call("HGETALL", "7") == "*2\r\n$4\r\nname\r\n$2\r\nLi\r\n")
        #expect(try line.roundTrip("UPDATE 42 name Fran\n") == "UPDATED")
        #expect(try resp.call("HGET", "42", "name") == "$4\r\nFran\r\n")
        #expect(try resp.call("DEL", "42", "7", "42") == ":2\r\n")
        #expect(try line.roundTrip("COUNT\n") == "COUNT 0")
    }

    /// An empty field is an absent field: HDEL empties one, and a profile left with neither is deleted.
    @Test func emptyFieldsAreAbsentFields() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "a", "portraitUri", "u") == ":1\r\n")
        #expect(try resp.call("HGETALL", "a") == "*2\r\n$11\r\nportraitUri\r\n$1\r\nu\r\n")
        #expect(try resp.call("HEXISTS", "a", "name") == ":0\r\n")
        #expect(try resp.call("HGET", "a", "name") == "$-1\r\n")
        #expect(try resp.call("HSET", "a", "name", "") == ":0\r\n")
        #expect(try resp.call("HSETNX", "a", "name", "n") == ":1\r\n")
        #expect(try resp.call("HSETNX", "a", "name", "other") == ":0\r\n")
        #expect(try resp.call("HDEL", "a", "name", "name", "portraitUri") == ":2\r\n")
        #expect(try resp.call("EXISTS", "a") == ":0\r\n")
        #expect(try resp.call("TYPE", "a") == "+none\r\n")
        #expect(try resp.call("HDEL", "a", "name") == ":0\r\n")
        let line = try server.connect()
        #expect(try line.roundTrip("COUNT\n") == "COUNT 0")
    }

    @Test func aKeyPrefixNamesProfilesAndNothingElse() throws {
        let server = try TestServer(["--resp-port", "0", "--resp-key-prefix", "user:"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "user:1", "name", "One") == ":1\r\n")
        #expect(try server.connect().roundTrip("GET 1\n") == #"VALUE 1 One """#)
        #expect(try resp.call("HSET", "1", "name", "x").hasPrefix("-ERR invalid key '1': a profile's key is the prefix 'user:'"))
        #expect(try resp.call("DEL", "user:1", "other") .hasPrefix("-ERR invalid key 'other'"))
        #expect(try resp.call("HGETALL", "1") == "*0\r\n")
        #expect(try resp.call("EXISTS", "user:1", "1", "user:") == ":1\r\n")
        #expect(try resp.call("SCAN", "0") == "*2\r\n$1\r\n0\r\n*1\r\n$6\r\nuser:1\r\n")
    }

    /// A key that is no userId (not UTF-8, a NUL, too long, the prefix alone) reads as no
    /// profile, and the store is not asked for it.
    @Test func aKeyThatIsNoUserIdIsReadAsAbsentWithoutTheStore() throws {
        let server = try TestServer(["--resp-port", "0", "--resp-key-prefix", "user:"])
        let resp = try server.connectRESP()
        func hgetall(_ key: [UInt8]) throws -> String {
            resp.send([UInt8]("*2\r\n$7\r\nHGETALL\r\n$\(key.count)\r\n".utf8) + key + [0x0D, 0x0A])
            return try resp.reply()
        }
        let prefix = [UInt8]("user:".utf8)
        for key in [prefix + [0xC3, 0x28], prefix + [0x61, 0x00], prefix + [UInt8](repeating: 0x61, count: 129), prefix] {
            #expect(try hgetall(key) == "*0\r\n")
        }
        let line = try server.connect()
        var stats = Dictionary(uniqueKeysWithValues: try line.stats().map { ($0.name, $0.value) })
        #expect(stats["get_misses"] == "4")
        #expect(stats["cache_misses"] == "0")
        // A userId the cache does not know goes to the store.
        #expect(try hgetall(prefix + [0x61]) == "*0\r\n")
        stats = Dictionary(uniqueKeysWithValues: try line.stats().map { ($0.name, $0.value) })
        #expect(stats["cache_misses"] == "1")
    }

    @Test func fieldsAndValuesAreCheckedAndABadWriteChangesNothing() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "k", "name", "n") == ":1\r\n")
        #expect(try resp.call("HSET", "k", "name", "m", "Name", "x")
                == "-ERR unknown profile field 'Name' (fields are name and portraitUri)\r\n")
        #expect(try resp.call("HSET", "k", "name", String(repeating: "x", count: 257))
                == "-ERR the value of 'name' is over 256 bytes\r\n")
        #expect(try resp.call("HSET", "k", "portraitUri", String(repeating: "u", count: 2049))
                == "-ERR the value of 'portraitUri' is over 2048 bytes\r\n")
        resp.send(Array("*4\r\n$4\r\nHSET\r\n$1\r\nk\r\n$4\r\nname\r\n$2\r\n".utf8) + [0xC3, 0x28] + Array("\r\n".utf8))
        #expect(try resp.reply() == "-ERR the value of 'name' is not UTF-8 without NUL\r\n")
        #expect(try resp.call("HMGET", "k", "name", "age") == "-ERR unknown profile field 'age' (fields are name and portraitUri)\r\n")
        #expect(try resp.call("HGET", "k", "name") == "$1\r\nn\r\n")
        let tooMany = ["DEL"] + (0...1000).map { "k\($0)" }
        resp.send(RESPTestClient.multibulk(tooMany))
        #expect(try resp.reply() == "-ERR too many keys or fields: at most 1000 in one command\r\n")
    }

    @Test func rolesAndAuthenticationAreTheLineProtocols() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        writeText(directory + "/tokens", "read r-token\nwrite w-token\nadmin a-token\n")
        let server = try TestServer(["--resp-port", "0", "--tokens", directory + "/tokens"])
        let resp = try server.connectRESP()
        #expect(try resp.call("PING") == "+PONG\r\n")
        #expect(try resp.call("HGET", "a", "name") == "-NOAUTH Authentication required.\r\n")
        #expect(try resp.call("HELLO", "3").hasPrefix(
            "%8\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.4.0\r\n$16\r\nprofiled_version\r\n$5\r\n\(profiledVersion)\r\n"))
        #expect(try resp.call("AUTH", "default", "wrong") == "-WRONGPASS invalid username-password pair or user is disabled.\r\n")
        #expect(try resp.call("AUTH", "r-token") == "+OK\r\n")
        #expect(try resp.call("HGET", "a", "name") == "_\r\n")
        #expect(try resp.call("HSET", "a", "name", "n") == "-NOPERM User default has no permissions to run the 'hset' command\r\n")
        // A write queued without the role fails the transaction.
        #expect(try resp.call("MULTI") == "+OK\r\n")
        #expect(try resp.call("HGET", "a", "name") == "+QUEUED\r\n")
        #expect(try resp.call("DEL", "a") == "-NOPERM User default has no permissions to run the 'del' command\r\n")
        #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try resp.call("HELLO", "2", "AUTH", "app", "w-token", "SETNAME", "chat").hasPrefix("*16\r\n"))
        #expect(try resp.call("CLIENT", "GETNAME") == "$4\r\nchat\r\n")
        #expect(try resp.call("HSET", "a", "name", "n") == ":1\r\n")
        #expect(try resp.call("FLUSHALL") == "-NOPERM User default has no permissions to run the 'flushall' command\r\n")
        // As on the line protocol, a failed AUTH leaves no role.
        #expect(try resp.call("AUTH", "nope") == "-WRONGPASS invalid username-password pair or user is disabled.\r\n")
        #expect(try resp.call("HGET", "a", "name") == "-NOAUTH Authentication required.\r\n")
        #expect(try resp.call("AUTH", "a-token") == "+OK\r\n")
        #expect(try resp.call("FLUSHDB", "ASYNC") == "+OK\r\n")
    }

    /// Before AUTH, the decoder's smaller limits apply: a request of more than 10 arguments
    /// closes the connection.
    @Test func unauthenticatedLimitsCloseTheConnection() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        writeText(directory + "/tokens", "read r-token\n")
        let server = try TestServer(["--resp-port", "0", "--tokens", directory + "/tokens"])
        let resp = try server.connectRESP()
        resp.send("*11\r\n")
        #expect(try resp.reply() == "-ERR Protocol error: unauthenticated multibulk length\r\n")
        #expect(try resp.isClosedByServer())
    }

    /// Replies keep request order: a read pipelined behind writes waits for them and sees them.
    @Test func pipelinedReadsSeeTheWritesBeforeThem() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        let requests: [[String]] = [["HSET", "k", "name", "a"], ["HGET", "k", "name"], ["HSET", "k", "name", "b"],
                                    ["HGET", "k", "name"], ["DEL", "k"], ["EXISTS", "k"], ["PING"]]
        resp.send(requests.flatMap(RESPTestClient.multibulk))
        let replies = try requests.map { _ in try resp.reply() }
        #expect(replies == [":1\r\n", "$1\r\na\r\n", ":0\r\n", "$1\r\nb\r\n", ":1\r\n", ":0\r\n", "+PONG\r\n"])
    }

    /// A request split anywhere, even a byte at a time, is answered once whole.
    @Test func aRequestSplitByteByByteIsAnsweredWhole() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        let request = RESPTestClient.multibulk(["HSET", "split", "name", "Fran", "portraitUri", "u"])
            + Array("HGET split name\r\n".utf8)
        for byte in request {
            resp.send([byte])
            usleep(200)
        }
        #expect(try resp.reply() == ":2\r\n")
        #expect(try resp.reply() == "$4\r\nFran\r\n")
    }

    @Test func aProtocolErrorIsAnsweredThenTheConnectionCloses() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        resp.send("PING\r\n*1\r\n$x\r\nPING\r\n")
        #expect(try resp.reply() == "+PONG\r\n")
        #expect(try resp.reply() == "-ERR Protocol error: invalid bulk length\r\n")
        #expect(try resp.isClosedByServer())
    }

    @Test func resp3AnswersWithMapsAndItsNull() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "m", "name", "n", "portraitUri", "u") == ":2\r\n")
        #expect(try resp.call("HELLO", "3").contains("$5\r\nproto\r\n:3\r\n"))
        #expect(try resp.call("HGETALL", "m") == "%2\r\n$4\r\nname\r\n$1\r\nn\r\n$11\r\nportraitUri\r\n$1\r\nu\r\n")
        #expect(try resp.call("HMGET", "none", "name") == "*1\r\n_\r\n")
        #expect(try resp.call("HGETALL", "none") == "%0\r\n")
        #expect(try resp.call("CONFIG", "GET", "save") == "%1\r\n$4\r\nsave\r\n$0\r\n\r\n")
        #expect(try resp.call("HELLO", "2").contains("$5\r\nproto\r\n:2\r\n"))
        #expect(try resp.call("HGET", "none", "name") == "$-1\r\n")
    }

    /// A transaction's writes commit together and its reads see the writes queued before them.
    @Test func aTransactionAnswersEachCommandAtItsTurn() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("MULTI") == "+OK\r\n")
        for command in [["HSET", "t", "name", "one"], ["HGETALL", "t"], ["HSET", "u", "portraitUri", "p"],
                        ["EXISTS", "t", "u", "v"], ["DBSIZE"], ["HDEL", "t", "name"], ["HGET", "t", "name"], ["PING"]] {
            resp.send(RESPTestClient.multibulk(command))
            #expect(try resp.reply() == "+QUEUED\r\n")
        }
        #expect(try resp.call("EXEC") == "*8\r\n:1\r\n*2\r\n$4\r\nname\r\n$3\r\none\r\n:1\r\n:2\r\n:1\r\n:1\r\n$-1\r\n+PONG\r\n")
        #expect(try resp.call("DBSIZE") == ":1\r\n")
        #expect(try resp.call("MULTI") == "+OK\r\n")
        #expect(try resp.call("HSET", "w", "name", "x") == "+QUEUED\r\n")
        #expect(try resp.call("HSET", "w", "nick", "x") == "-ERR unknown profile field 'nick' (fields are name and portraitUri)\r\n")
        #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try resp.call("EXISTS", "w") == ":0\r\n")
    }

    /// EXEC answers at once, and over a shared store only the fetchers read a SCAN: it is
    /// refused inside MULTI there, which fails the transaction; a server's own store answers it.
    @Test func aScanInATransactionIsAnsweredWhereTheServerReadsItsStoreItself() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "s", "name", "n") == ":1\r\n")
        #expect(try resp.call("MULTI") == "+OK\r\n")
        if testStoreIsPostgres {
            #expect(try resp.call("SCAN", "0") == "-ERR SCAN cannot be queued in a transaction over a shared store (--postgres)\r\n")
            #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        } else {
            #expect(try resp.call("SCAN", "0") == "+QUEUED\r\n")
            #expect(try resp.call("EXEC") == "*1\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\ns\r\n")
        }
    }

    /// A MULTI queue holds at most 1,000 commands and 4 MiB: 1,000 HSETs of the longest key
    /// and values fit; HSETs of a thousand fields each fail the transaction at the 4 MiB, and
    /// the commands after it are answered QUEUED but not kept.
    @Test func aTransactionsQueueIsBoundedInCommandsAndBytes() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        let name = String(repeating: "n", count: 256), uri = String(repeating: "u", count: 2048)
        #expect(try resp.call("MULTI") == "+OK\r\n")
        var requests: [UInt8] = []
        for i in 0..<1000 {
            let key = String(i) + String(repeating: "k", count: 128 - String(i).count)
            requests += RESPTestClient.multibulk(["HSET", key, "name", name, "portraitUri", uri])
        }
        resp.send(requests)
        for _ in 0..<1000 { #expect(try resp.reply() == "+QUEUED\r\n") }
        #expect(try resp.call("PING") == "-ERR a transaction holds at most 1000 commands\r\n")
        #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try resp.call("DBSIZE") == ":0\r\n")

        #expect(try resp.call("MULTI") == "+OK\r\n")
        // 1.05 MB each, with the allowance for each of its 1,002 arguments: three fit.
        let wide = ["HSET", "w"] + (0..<500).flatMap { _ in ["portraitUri", String(repeating: "p", count: 2000)] }
        for _ in 0..<3 {
            resp.send(RESPTestClient.multibulk(wide))
            #expect(try resp.reply() == "+QUEUED\r\n")
        }
        resp.send(RESPTestClient.multibulk(wide))
        #expect(try resp.reply() == "-ERR a transaction holds at most 4 MiB of queued commands\r\n")
        resp.send(RESPTestClient.multibulk(wide))
        #expect(try resp.reply() == "+QUEUED\r\n")
        #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try resp.call("EXISTS", "w") == ":0\r\n")

        // A transaction of the longest values commits whole.
        #expect(try resp.call("MULTI") == "+OK\r\n")
        resp.send(requests)
        for _ in 0..<1000 { #expect(try resp.reply() == "+QUEUED\r\n") }
        let answer = try resp.call("EXEC")
        #expect(answer.hasPrefix("*1000\r\n:2\r\n"), "\(answer.prefix(40))")
        #expect(try resp.call("DBSIZE") == ":1000\r\n")

        // The replies are bounded too, before anything is read: eight HMGETs of a thousand
        // fields may answer 16.5 MB (a thousand of the longest values each); a ninth fails
        // the transaction. A thousand HGETALLs fit.
        #expect(try resp.call("MULTI") == "+OK\r\n")
        let hmget = RESPTestClient.multibulk(["HMGET", "0" + String(repeating: "k", count: 127)]
                                             + Array(repeating: "portraitUri", count: 1000))
        for _ in 0..<8 {
            resp.send(hmget)
            #expect(try resp.reply() == "+QUEUED\r\n")
        }
        resp.send(hmget)
        #expect(try resp.reply() == "-ERR a transaction's replies may take at most 16 MiB\r\n")
        #expect(try resp.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try resp.call("MULTI") == "+OK\r\n")
        resp.send((0..<1000).flatMap { _ in RESPTestClient.multibulk(["HGETALL", "0" + String(repeating: "k", count: 127)]) })
        for _ in 0..<1000 { #expect(try resp.reply() == "+QUEUED\r\n") }
        #expect(try resp.call("EXEC").hasPrefix("*1000\r\n*4\r\n$4\r\nname\r\n"))
    }

    /// SCAN returns every key present for the whole scan exactly once, at most COUNT per call.
    @Test func scanVisitsEveryKeyOnce() throws {
        let server = try TestServer(["--resp-port", "0"])
        let line = try server.connect()
        for batch in 0..<5 {
            let triples = (0..<500).map { "id\(batch * 500 + $0) n u" }.joined(separator: " ")
            #expect(try line.roundTrip("MSET \(triples)\n") == "STORED 500")
        }
        let resp = try server.connectRESP()
        var seen: [String] = []
        var cursor = "0"
        var calls = 0
        repeat {
            let reply = try resp.call("SCAN", cursor, "COUNT", "100")
            let parts = reply.split(separator: "\r\n").map(String.init)
            cursor = parts[2]
            seen += stride(from: 5, to: parts.count, by: 2).map { parts[$0] }
            calls += 1
        } while cursor != "0" && calls < 100
        #expect(seen.count == 2500)
        #expect(Set(seen).count == 2500)
        #expect(calls == 26)
        // The first 1,000 ids in byte order (id0, id1, id10, id100, id1000, ...) hold id1000 to id1009.
        let matched = try resp.call("SCAN", "0", "MATCH", "id100?", "COUNT", "1000")
        #expect(matched.hasSuffix("*10\r\n" + (0...9).map { "$6\r\nid100\($0)\r\n" }.joined()), "\(matched)")
        #expect(!matched.hasPrefix("*2\r\n$1\r\n0\r\n"), "the scan had more to look at")
        #expect(try resp.call("SCAN", "0", "TYPE", "string") == "*2\r\n$1\r\n0\r\n*0\r\n")
        #expect(try resp.call("SCAN", "12345") == "-ERR invalid cursor\r\n")
    }

    @Test func connectionsOfBothListenersShareTheLimit() throws {
        let server = try TestServer(["--resp-port", "0", "--max-connections", "1"])
        let line = try server.connect()
        #expect(try line.roundTrip("PING\n") == "PONG")
        if testTransportIsTLS {
            // Nothing can be said before a handshake: the connection is closed in it.
            #expect(throws: (any Error).self) { _ = try server.connectRESP() }
        } else {
            let resp = try server.connectRESP()
            #expect(try resp.reply() == "-ERR max number of clients reached\r\n")
            #expect(try resp.isClosedByServer())
        }
    }

    @Test func statsAndInfoCountRESPCommands() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "s", "name", "n") == ":1\r\n")
        #expect(try resp.call("HGETALL", "s").hasPrefix("*2\r\n"))
        #expect(try resp.call("HGET", "missing", "name") == "$-1\r\n")
        var info = try resp.call("INFO")
        // A node over PostgreSQL counts the table once a second, and a count begun before the
        // write may land after it: its row count catches up within the next count.
        for _ in 0..<30 where server.isOverPostgres && !info.contains("db0:keys=1,") {
            usleep(100_000)
            info = try resp.call("INFO")
        }
        #expect(info.contains("loading:0\r\n"))
        #expect(info.contains("db0:keys=1,expires=0,avg_ttl=0\r\n"))
        #expect(info.contains("keyspace_hits:1\r\nkeyspace_misses:1\r\n"))
        #expect(info.contains("tcp_port:\(server.respPort)\r\n"))
        #expect(try resp.call("INFO", "persistence") == "$26\r\n# Persistence\r\nloading:0\r\n\r\n")
        let stats = Dictionary(uniqueKeysWithValues: try server.connect().stats().map { ($0.name, $0.value) })
        #expect(stats["cmd_get"] == "2")
        #expect(stats["cmd_set"] == "1")
    }

    @Test func quitAnswersThenCloses() throws {
        let server = try TestServer(["--resp-port", "0"])
        let resp = try server.connectRESP()
        resp.send("QUIT\r\nPING\r\n")
        #expect(try resp.reply() == "+OK\r\n")
        #expect(try resp.isClosedByServer())
    }
}
