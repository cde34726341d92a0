import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Roles, tokens and protected mode (PROTOCOL.md "Roles and authentication").
@Suite struct ServerAuthTests {
    @Test func rolesNest() throws {
        let directory = try makeTemporaryDirectory()
        writeText(directory + "/tokens", "# comment\n\n  read   r-token\nwrite\tw-token\nadmin a-token\n")
        let server = try TestServer(["--tokens", directory + "/tokens"], directory: directory)
        let c = try server.connect()
        #expect(try c.roundTrip("PING\n") == "PONG")
        #expect(try c.roundTrip("GET a\n").hasPrefix("ERROR NOAUTH"))
        #expect(try c.roundTrip("STATS\n").hasPrefix("ERROR NOAUTH"))
        #expect(try c.roundTrip("AUTH nope\n").hasPrefix("ERROR DENIED"))
        #expect(try c.roundTrip("GET a\n").hasPrefix("ERROR NOAUTH"))

        #expect(try c.roundTrip("AUTH w-token\n") == "OK")
        #expect(try c.roundTrip("SET a n u\n") == "STORED")
        #expect(try c.roundTrip("FLUSHALL\n").hasPrefix("ERROR DENIED"))
        // Wrong argument count leaves the role as it was.
        #expect(try c.roundTrip("AUTH\n").hasPrefix("ERROR ARGS"))
        #expect(try c.roundTrip("DEL zz\n") == "NOTFOUND zz")

        #expect(try c.roundTrip("AUTH r-token\n") == "OK")
        #expect(try c.roundTrip("GET a\n") == "VALUE a n u")
        #expect(try c.roundTrip("SET a n u\n").hasPrefix("ERROR DENIED"))
        #expect(try c.roundTrip("GET a\n") == "VALUE a n u")

        // A failed AUTH leaves no role at all.
        #expect(try c.roundTrip("AUTH wrong\n").hasPrefix("ERROR DENIED"))
        #expect(try c.roundTrip("GET a\n").hasPrefix("ERROR NOAUTH"))

        #expect(try c.roundTrip("AUTH a-token\n") == "OK")
        #expect(try c.roundTrip("FLUSHALL\n") == "OK")
        #expect(try c.roundTrip("QUIT\n") == "BYE")
    }

    /// A token is matched whole: one wrong only in its last byte, one byte short or long, a
    /// prefix of another or another with it as a prefix gets no role, over both fronts, and
    /// each role's exact token gets that role and no other.
    @Test func onlyAWholeTokenMatches() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The admin's token begins with the reader's, whole.
        let tokens = [("read", "token-for-reading"), ("write", "token-for-writing!"), ("admin", "token-for-reading-and-more")]
        writeText(directory + "/tokens", tokens.map { "\($0.0) \($0.1)\n" }.joined())
        let server = try TestServer(["--resp-port", "0", "--tokens", directory + "/tokens"], directory: directory)
        let line = try server.connect()
        let resp = try server.connectRESP()
        for (_, token) in tokens {
            let lastByteWrong = String(token.dropLast()) + (token.last == "x" ? "y" : "x")
            for wrong in [lastByteWrong, String(token.dropLast()), token + "x", "x" + token, String(token.dropFirst())] {
                #expect(try line.roundTrip("AUTH \(wrong)\n").hasPrefix("ERROR DENIED"), "AUTH \(wrong)")
                #expect(try line.roundTrip("GET a\n").hasPrefix("ERROR NOAUTH"), "GET after AUTH \(wrong)")
                #expect(try resp.call("AUTH", wrong).hasPrefix("-WRONGPASS"), "AUTH \(wrong)")
                #expect(try resp.call("HGET", "a", "name").hasPrefix("-NOAUTH"), "HGET after AUTH \(wrong)")
            }
        }
        // Each exact token: reads for all, writes from write up, FLUSHALL for admin alone.
        for (role, token) in tokens {
            #expect(try line.roundTrip("AUTH \(token)\n") == "OK")
            #expect(try line.roundTrip("GET a\n") == "NOTFOUND a")
            #expect(try line.roundTrip("DEL a\n").hasPrefix(role == "read" ? "ERROR DENIED" : "NOTFOUND"), "\(role)")
            #expect(try line.roundTrip("FLUSHALL\n").hasPrefix(role == "admin" ? "OK" : "ERROR DENIED"), "\(role)")
            #expect(try resp.call("AUTH", token) == "+OK\r\n")
            #expect(try resp.call("DEL", "a").hasPrefix(role == "read" ? "-NOPERM" : ":0"), "\(role)")
        }
    }

    @Test func authWithoutTokensChangesNothing() throws {
        let server = try TestServer()
        let c = try server.connect()
        #expect(try c.roundTrip("AUTH anything\n") == "OK")
        #expect(try c.roundTrip("FLUSHALL\n") == "OK")
    }

    @Test func badTokenFilesStopStartupWithFileAndLine() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let cases: [(String, String)] = [
            ("read a\nread cert-cn\n", ":2: expected '<role> <token>' or '<role> cert-cn <name>'"),
            ("read cert-cn chat-1\nwrite cert-cn chat-1\n", ":2: certificate name listed twice"),
            ("read cert-cn chat 1\n", ":1:"),
            ("read a\nboss b\n", ":2:"),
            ("read a\nwrite\n", ":2:"),
            ("read a b\n", ":1:"),
            ("read a\n# x\nwrite a\n", ":3:"),
            ("# nothing\n\n", "no tokens"),
        ]
        for (i, (text, expected)) in cases.enumerated() {
            let path = directory + "/tokens\(i)"
            writeText(path, text)
            // Bounded: a server that wrongly starts is killed, and the test fails.
            let run = try runCommand([executable("profiled"), "--tokens", path, "--port", "0", "--db", directory + "/db\(i)"],
                                     timeoutSeconds: 10)
            #expect(run.status != 0)
            #expect(run.stderr.contains(path + expected) || run.stderr.contains(expected), "\(run)")
            #expect(run.stderr.split(separator: "\n").count == 1, "\(run)")
        }
        let (status, output) = try runToCompletion(executable("profiled"),
                                                   ["--tokens", directory + "/missing", "--port", "0", "--db", directory + "/db"])
        #expect(status != 0)
        #expect(output.contains(directory + "/missing"))
    }

    @Test func protectedModeRefusesAnOpenAddressWithoutTokens() throws {
        let directory = try makeTemporaryDirectory()
        let (status, output) = try runToCompletion(executable("profiled"),
                                                   ["--host", "0.0.0.0", "--port", "0", "--db", directory + "/db"])
        #expect(status == 64)
        #expect(output.contains("--allow-insecure-bind"))
        #expect(output.split(separator: "\n").count == 1)
        // With the flag it starts; loopback names never need it.
        let open = try TestServer(["--host", "0.0.0.0", "--allow-insecure-bind"], directory: directory)
        #expect(open.log.contains("msg=listening"))
        let local = try TestServer(["--host", "localhost"])
        #expect(local.log.contains("msg=listening"))
    }
}
