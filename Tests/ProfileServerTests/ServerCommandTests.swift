import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Every command of PROTOCOL.md, over TCP, as raw lines.
@Suite struct ServerCommandTests {
    @Test func exampleSessionFromTheProtocol() throws {
        let server = try TestServer()
        let c = try server.connect()
        #expect(try c.roundTrip("PING\n") == "PONG")
        #expect(try c.roundTrip("SET 42 \"Fran Li\" https://cdn.example/p/42.png\n") == "STORED")
        #expect(try c.roundTrip("GET 42\n") == "VALUE 42 \"Fran Li\" https://cdn.example/p/42.png")
        #expect(try c.roundTrip("UPDATE 42 name 小明\n") == "UPDATED")
        #expect(try c.roundTrip("MGET 42 7\n") == "VALUE 42 小明 https://cdn.example/p/42.png")
        #expect(try c.line() == "NOTFOUND 7")
        #expect(try c.line() == "END")
        #expect(try c.roundTrip("DEL 42\n") == "DELETED")
        #expect(try c.roundTrip("GET 42\n") == "NOTFOUND 42")
        #expect(try c.roundTrip("FROB\n") == "ERROR UNKNOWN unknown command 'FROB'")
    }

    @Test func framingCRLFBlankLinesAndCase() throws {
        let server = try TestServer()
        let c = try server.connect()
        // Blank lines get no reply; CRLF works; verbs are case-insensitive.
        #expect(try c.roundTrip("\n   \n\t\r\nping\r\n") == "PONG")
        #expect(try c.roundTrip("Ping\n") == "PONG")
        #expect(try c.roundTrip("  set  a\tb   c  \n") == "STORED")
        #expect(try c.roundTrip("gEt a\n") == "VALUE a b c")
        // A CR anywhere else is a parse error, and the connection stays open.
        #expect(try c.roundTrip("GET a\rb\n").hasPrefix("ERROR PARSE "))
        #expect(try c.roundTrip("PING\n") == "PONG")
    }

    @Test func quotingRoundTripsEveryAwkwardValue() throws {
        let server = try TestServer()
        let c = try server.connect()
        let name: [UInt8] = Array("a \"q\" \\ tab\there\nnl\r".utf8) + [0x01, 0x7F] + Array(" 😀".utf8)
        try c.set(Profile(userId: Array("id with space".utf8), name: name, portraitUri: []))
        let got = try c.get(Array("id with space".utf8))
        #expect(got == Profile(userId: Array("id with space".utf8), name: name, portraitUri: []))
        #expect(try c.roundTrip("GET \"id with space\"\n")
            == "VALUE \"id with space\" \"a \\\"q\\\" \\\\ tab\\there\\nnl\\r\\x01\\x7f 😀\" \"\"")
        #expect(try c.roundTrip("SET \"x\\x41\" \"\" \"\"\n") == "STORED")
        #expect(try c.roundTrip("GET xA\n") == "VALUE xA \"\" \"\"")
    }

    @Test func msetIsAllOrNothingAndKeepsTheLastRepeat() throws {
        let server = try TestServer()
        let c = try server.connect()
        #expect(try c.roundTrip("MSET a n1 u1 b n2 u2 a n3 u3\n") == "STORED 3")
        #expect(try c.roundTrip("GET a\n") == "VALUE a n3 u3")
        #expect(try c.roundTrip("MGET a b a zz\n") == "VALUE a n3 u3")
        #expect(try c.line() == "VALUE b n2 u2")
        #expect(try c.line() == "VALUE a n3 u3")
        #expect(try c.line() == "NOTFOUND zz")
        #expect(try c.line() == "END")
        // A fault anywhere in the request writes none of it.
        let long = String(repeating: "x", count: 257)
        #expect(try c.roundTrip("MSET c n u d \(long) u\n").hasPrefix("ERROR TOOLARGE name"))
        #expect(try c.roundTrip("MSET c n u d n\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("EXISTS c\n") == "NO")
        #expect(try c.roundTrip("COUNT\n") == "COUNT 2")
    }

    @Test func updateChangesOnlyTheNamedFields() throws {
        let server = try TestServer()
        let c = try server.connect()
        #expect(try c.roundTrip("UPDATE nobody name x\n") == "NOTFOUND nobody")
        #expect(try c.roundTrip("EXISTS nobody\n") == "NO")
        #expect(try c.roundTrip("SET u n p\n") == "STORED")
        #expect(try c.roundTrip("UPDATE u portraitUri q\n") == "UPDATED")
        #expect(try c.roundTrip("GET u\n") == "VALUE u n q")
        #expect(try c.roundTrip("UPDATE u name m portraitUri r\n") == "UPDATED")
        #expect(try c.roundTrip("GET u\n") == "VALUE u m r")
        #expect(try c.roundTrip("UPDATE u name a name b\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("UPDATE u Name a\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("UPDATE u name\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("GET u\n") == "VALUE u m r")
    }

    @Test func delExistsCountAndFlushAll() throws {
        let server = try TestServer()
        let c = try server.connect()
        #expect(try c.roundTrip("COUNT\n") == "COUNT 0")
        #expect(try c.roundTrip("DEL a\n") == "NOTFOUND a")
        #expect(try c.roundTrip("MSET a 1 1 b 2 2 c 3 3\n") == "STORED 3")
        #expect(try c.roundTrip("EXISTS b\n") == "YES")
        #expect(try c.roundTrip("DEL b\n") == "DELETED")
        #expect(try c.roundTrip("EXISTS b\n") == "NO")
        #expect(try c.roundTrip("GET b\n") == "NOTFOUND b")
        #expect(try c.roundTrip("COUNT\n") == "COUNT 2")
        #expect(try c.roundTrip("FLUSHALL\n") == "OK")
        #expect(try c.roundTrip("COUNT\n") == "COUNT 0")
        #expect(try c.roundTrip("GET a\n") == "NOTFOUND a")
    }

    @Test func recentIsNewestFirstAndSkipsDeleted() throws {
        let server = try TestServer()
        let c = try server.connect()
        for i in 0..<25 { #expect(try c.roundTrip("SET u\(i) n u\n") == "STORED") }
        #expect(try c.roundTrip("UPDATE u3 name x\n") == "UPDATED")
        #expect(try c.roundTrip("DEL u24\n") == "DELETED")
        #expect(try c.roundTrip("MSET m1 n u m2 n u\n") == "STORED 2")
        let recent = try c.recent().map { String(decoding: $0.userId, as: UTF8.self) }
        #expect(recent.count == 20)
        #expect(Array(recent.prefix(5)) == ["m2", "m1", "u3", "u23", "u22"])
        let three = try c.recent(3).map { String(decoding: $0.userId, as: UTF8.self) }
        #expect(three == ["m2", "m1", "u3"])
        #expect(try c.roundTrip("RECENT 0\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("RECENT 1001\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("RECENT -1\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("RECENT 1 2\n").hasPrefix("ERROR ARGS"))
    }

    @Test func scanPagesInByteOrder() throws {
        let server = try TestServer()
        let c = try server.connect()
        let ids = ["b", "a", "ä", "c1", "c10", "c2", "Z", "中"]
        for id in ids { try c.set(Profile(userId: id, name: "n", portraitUri: "u")) }
        var seen: [String] = []
        var after: [UInt8] = []
        while true {
            let page = try c.scan(after: after, limit: 3)
            seen += page.map { String(decoding: $0.userId, as: UTF8.self) }
            if page.count < 3 { break }
            after = page.last!.userId
        }
        #expect(seen == ids.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
        #expect(try c.roundTrip("SCAN \"\" 0\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("SCAN\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("SCAN 中\n") == "END")
    }

    @Test func statsCountWhatHappened() throws {
        let server = try TestServer()
        let c = try server.connect()
        _ = try c.roundTrip("MSET a n u b n u c n u\n")
        _ = try c.roundTrip("UPDATE a name m\n")
        _ = try c.roundTrip("UPDATE zz name m\n")
        _ = try c.roundTrip("DEL b\n")
        _ = try c.roundTrip("DEL b\n")
        _ = try c.roundTrip("GET a\n")
        _ = try c.roundTrip("GET b\n")
        _ = try c.roundTrip("GET b\n")
        _ = try c.roundTrip("EXISTS c\n")
        c.send("MGET", ["a", "c", "q"])
        try c.flush()
        _ = try c.readLines()
        _ = try c.roundTrip("BOGUS\n")
        // Every value is a number, but a shared store's kind (docs/CLUSTER.md), which a server
        // over its own file leaves out.
        let lines = try c.stats()
        #expect(lines.map(\.name).contains("store_kind") == testStoreIsPostgres)
        let stats = Dictionary(uniqueKeysWithValues: lines.filter { $0.name != "store_kind" }.map { ($0.name, Int($0.value)!) })
        for name in ["uptime_seconds", "curr_connections", "total_connections", "cmd_get", "get_hits", "get_misses",
                     "cache_hits", "cache_misses", "cache_evictions", "cache_items", "cache_bytes", "cache_limit_bytes",
                     "cmd_set", "cmd_del", "store_rows", "errors", "client_memory_bytes", "client_memory_limit_bytes",
                     "client_evictions", "cache_small_bytes", "cache_promotions", "cache_ghost_hits"] {
            #expect(stats[name] != nil, "STATS lacks \(name)")
        }
        #expect(stats["cmd_get"] == 7)
        #expect(stats["get_hits"] == 4)
        #expect(stats["get_misses"] == 3)
        #expect(stats["cache_hits"]! + stats["cache_misses"]! == 7)
        #expect(stats["cmd_set"] == 4)
        #expect(stats["cmd_del"] == 1)
        #expect(stats["store_rows"] == 2)
        #expect(stats["errors"] == 1)
        #expect(stats["curr_connections"] == 1)
        #expect(stats["total_connections"] == 1)
        #expect(stats["cache_limit_bytes"] == 256 * 1_048_576)
    }

    @Test func quitSaysByeAndCloses() throws {
        let server = try TestServer()
        let c = try server.connect()
        c.sendRaw(Array("QUIT\nPING\n".utf8))
        try c.flush()
        #expect(try c.line() == "BYE")
        #expect(try c.isClosedByServer())
    }

    @Test func unixSocketServesTheSameProtocol() throws {
        let directory = try makeTemporaryDirectory()
        let path = directory + "/profiled.sock"
        let server = try TestServer(["--unix", path], directory: directory)
        let c = try ProfileConnection(.unix(path: path))
        #expect(try c.roundTrip("SET u n p\n") == "STORED")
        let tcp = try server.connect()
        #expect(try tcp.roundTrip("GET u\n") == "VALUE u n p")
    }
}
