import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Every error code of PROTOCOL.md and the order in which they are reported.
@Suite struct ServerErrorTests {
    @Test func parseErrors() throws {
        let server = try TestServer()
        let c = try server.connect()
        for bad in ["GET \"abc\n", "GET \"a\\qb\"\n", "GET \"a\\x4\"\n", "GET \"a\"b\n", "GET \"a\u{01}\"\n",
                    "GET \"\\x00\"\n", "GET \"\\xff\"\n", "GET a\rb\n"] {
            #expect(try c.roundTrip(bad).hasPrefix("ERROR PARSE "), "\(bad.debugDescription)")
        }
        // Invalid UTF-8 in a bare token.
        c.sendRaw([0x47, 0x45, 0x54, 0x20, 0xC3, 0x28, 0x0A])
        try c.flush()
        #expect(try c.line().hasPrefix("ERROR PARSE "))
        #expect(try c.roundTrip("PING\n") == "PONG")
    }

    @Test func argumentErrors() throws {
        let server = try TestServer()
        let c = try server.connect()
        for bad in ["GET\n", "GET a b\n", "GET \"\"\n", "SET a b\n", "SET a b c d\n", "MGET\n", "MSET\n",
                    "MSET a b\n", "DEL\n", "EXISTS\n", "COUNT x\n", "PING x\n", "RECENT 01x\n", "RECENT 1234567890\n",
                    "RECENT +5\n", "SCAN a 1001\n", "AUTH\n", "AUTH a b\n", "FLUSHALL now\n", "QUIT now\n", "STATS x\n",
                    "UPDATE a\n", "UPDATE a bogus v\n", "MGET a \"\"\n"] {
            #expect(try c.roundTrip(bad).hasPrefix("ERROR ARGS "), "\(bad.debugDescription)")
        }
    }

    @Test func valueLimitsAtTheirBoundaries() throws {
        let server = try TestServer()
        let c = try server.connect()
        let id128 = String(repeating: "i", count: 128)
        let name256 = String(repeating: "n", count: 256)
        let uri2048 = String(repeating: "u", count: 2048)
        #expect(try c.roundTrip("SET \(id128) \(name256) \(uri2048)\n") == "STORED")
        #expect(try c.roundTrip("SET \(id128)i n u\n").hasPrefix("ERROR TOOLARGE userId"))
        #expect(try c.roundTrip("SET a \(name256)n u\n").hasPrefix("ERROR TOOLARGE name"))
        #expect(try c.roundTrip("SET a n \(uri2048)u\n").hasPrefix("ERROR TOOLARGE portraitUri"))
        #expect(try c.roundTrip("GET \(id128)i\n").hasPrefix("ERROR TOOLARGE userId"))
        #expect(try c.roundTrip("EXISTS \(id128)i\n").hasPrefix("ERROR TOOLARGE userId"))
        #expect(try c.roundTrip("UPDATE a name \(name256)n\n").hasPrefix("ERROR TOOLARGE name"))
        // Escapes count after unescaping: 128 escaped bytes are 128 bytes.
        let escaped = String(repeating: "\\x41", count: 128)
        #expect(try c.roundTrip("GET \"\(escaped)\"\n") == "NOTFOUND \(String(repeating: "A", count: 128))")
        let ids1000 = (0..<1000).map { "k\($0)" }.joined(separator: " ")
        c.sendRaw(Array("MGET \(ids1000)\n".utf8))
        try c.flush()
        #expect(try c.readLines().count == 1000)
        #expect(try c.roundTrip("MGET \(ids1000) k\n").hasPrefix("ERROR TOOLARGE count"))
        let triples1001 = (0..<1001).map { "k\($0) n u" }.joined(separator: " ")
        #expect(try c.roundTrip("MSET \(triples1001)\n").hasPrefix("ERROR TOOLARGE count"))
        #expect(try c.roundTrip("COUNT\n") == "COUNT 1")
    }

    @Test func errorPrecedence() throws {
        let directory = try makeTemporaryDirectory()
        writeText(directory + "/tokens", "read r-token\nwrite w-token\n")
        let server = try TestServer(["--tokens", directory + "/tokens"], directory: directory)
        let c = try server.connect()
        let longId = String(repeating: "i", count: 200)
        // PARSE before UNKNOWN before NOAUTH before DENIED before ARGS before TOOLARGE.
        #expect(try c.roundTrip("FROB \"x\n").hasPrefix("ERROR PARSE"))
        #expect(try c.roundTrip("FROB x\n").hasPrefix("ERROR UNKNOWN"))
        #expect(try c.roundTrip("SET a b\n").hasPrefix("ERROR NOAUTH"))
        #expect(try c.roundTrip("AUTH r-token\n") == "OK")
        #expect(try c.roundTrip("SET a b\n").hasPrefix("ERROR DENIED"))
        #expect(try c.roundTrip("GET a b\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("MGET \"\" \(longId)\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("GET \(longId)\n").hasPrefix("ERROR TOOLARGE"))
    }

    @Test func tooLongLineIsRefusedAndClosed() throws {
        let server = try TestServer(["--max-line", "1024"])
        let c = try server.connect()
        // Exactly the limit, LF included, is fine; a CR before the LF counts too.
        let fits = "GET " + String(repeating: "a", count: 1024 - 5) + "\n"
        #expect(try c.roundTrip(fits).hasPrefix("ERROR TOOLARGE userId"))
        let fitsWithCR = "GET " + String(repeating: "a", count: 1024 - 6) + "\r\n"
        #expect(try c.roundTrip(fitsWithCR).hasPrefix("ERROR TOOLARGE userId"))
        // One byte over the limit without an LF.
        c.sendRaw(Array(("GET " + String(repeating: "a", count: 1021)).utf8))
        try c.flush()
        #expect(try c.line() == "ERROR TOOLONG request line over 1024 bytes, LF included (--max-line)")
        #expect(try c.isClosedByServer())
        // Nothing before the over-long line is lost.
        let d = try server.connect()
        d.sendRaw(Array(("PING\n" + String(repeating: "x", count: 5000)).utf8))
        try d.flush()
        #expect(try d.line() == "PONG")
        #expect(try d.line().hasPrefix("ERROR TOOLONG "))
    }

    /// 65,536 bytes without an LF are not too long yet: the LF may come next. Here the client
    /// stops sending instead, and the server closes without a reply, as after any unfinished line.
    @Test func theLimitWithoutAnLFIsNotTooLongYet() throws {
        let server = try TestServer()
        let c = try server.connect()
        c.sendRaw(Array(("PING\nGET " + String(repeating: "a", count: 65_536 - 4)).utf8))
        try c.finishSending()
        #expect(try c.line() == "PONG")
        #expect(try c.isClosedByServer())
    }

    /// The byte past the limit may come long after the limit's bytes: the server, holding no
    /// more than the limit, refuses the line when it comes.
    @Test func theByteBeyondTheLimitIsTooLongWhenItComes() throws {
        let server = try TestServer(["--max-line", "1024"])
        try Self.expectTheByteBeyondTheLimitIsTooLong(on: try server.connect())
    }

    /// Sends a PING and a line of exactly `--max-line` 1024 bytes without its LF, then, once
    /// the server has taken them in, one byte more: PONG, then ERROR TOOLONG and the close.
    static func expectTheByteBeyondTheLimitIsTooLong(on c: ProfileConnection) throws {
        c.sendRaw(Array(("PING\nGET " + String(repeating: "a", count: 1024 - 4)).utf8))
        try c.flush()
        #expect(try c.line() == "PONG")
        usleep(100_000)  // lets the server take in the limit's bytes before the next one
        c.sendRaw([UInt8(ascii: "a")])
        try c.flush()
        #expect(try c.line().hasPrefix("ERROR TOOLONG "))
        #expect(try c.isClosedByServer())
    }

    @Test func tooManyConnectionsAreRefusedWithBusy() throws {
        let server = try TestServer(["--max-connections", "2"])
        let a = try server.connect()
        let b = try server.connect()
        #expect(try a.roundTrip("PING\n") == "PONG")
        #expect(try b.roundTrip("PING\n") == "PONG")
        if testTransportIsTLS {
            // Nothing can be said before a handshake: the connection is closed in it.
            #expect(throws: ClientError.self) { _ = try server.connect() }
        } else {
            let refused = try server.connect()
            #expect(try refused.line().hasPrefix("ERROR BUSY "))
            #expect(try refused.isClosedByServer())
        }
        let stats = Dictionary(uniqueKeysWithValues: try a.stats().map { ($0.name, $0.value) })
        #expect(stats["curr_connections"] == "2")
        #expect(stats["total_connections"] == "2")
        #expect(stats["errors"] == "1")
        // A slot frees up when a client leaves.
        try b.quit()
        var answered = false
        for _ in 0..<200 where !answered {
            // Until the server has seen the client leave, a new connection is refused: with
            // BUSY in clear, in the handshake over TLS.
            if let again = try? server.connect(), let reply = try? again.roundTrip("PING\n"), reply == "PONG" {
                answered = true
            } else {
                usleep(10_000)
            }
        }
        #expect(answered)
    }
}
