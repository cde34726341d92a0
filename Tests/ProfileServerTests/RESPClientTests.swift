import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Redis clients no one here wrote, unmodified, against the RESP front (RESP.md): redis-py
/// with its hiredis and pure-Python parsers in RESP3 and RESP2, and Debian's redis-cli and
/// redis-benchmark, and Debian's node-redis. Scripts/test installs all of them.
@Suite struct RESPClientTests {
    /// profiled with the RESP front on a free port and keys prefixed `user:`; with tokens
    /// of each role when asked. Tests reach it through this object, which keeps it running.
    final class Front {
        static let tokens = "admin a-resp-token\nwrite w-resp-token\nread r-resp-token\n"
        let server: TestServer
        let port: UInt16

        init(tokens: Bool) throws {
            var arguments = ["--resp-port", "0", "--resp-key-prefix", "user:"]
            // The tokens file is read at start-up only.
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            if tokens {
                writeText(directory + "/tokens", Self.tokens)
                arguments += ["--tokens", directory + "/tokens"]
            }
            server = try TestServer(arguments)
            port = server.respFrontPort
        }

        /// redis-cli with `arguments`, pointed at the RESP front.
        func cli(_ arguments: [String], stdinPath: String = "/dev/null") throws -> CommandOutput {
            try redisCli(port, tlsArguments(cli: true) + arguments, stdinPath: stdinPath)
        }

        /// What a client needs to reach `port` over TLS when the tests run over TLS: redis-cli's
        /// and redis-benchmark's flags, or the scripts' `--tls-ca`.
        func tlsArguments(cli: Bool) throws -> [String] {
            guard testTransportIsTLS else { return [] }
            let ca = try TestCertificates.shared().caCertificate
            return cli ? ["--tls", "--cacert", ca] : ["--tls-ca", ca]
        }
    }

    static let redisPy = repositoryPath("Tests/RESPClients/redis_py_client.py")

    // MARK: redis-py

    @Test func redisPyWithTokensThroughBothParsersInBothProtocols() throws {
        let front = try Front(tokens: true)
        let run = try runCommand(["python3", Self.redisPy, "--port", "\(front.port)", "--key-prefix", "user:"] + front.tlsArguments(cli: false) + [
                                  "--user", "app", "--token", "w-resp-token",
                                  "--read-user", "reader", "--read-token", "r-resp-token"], timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(front.server.log)")
    }

    @Test func redisPyWithoutTokensThroughBothParsersInBothProtocols() throws {
        let front = try Front(tokens: false)
        let run = try runCommand(["python3", Self.redisPy, "--port", "\(front.port)", "--key-prefix", "user:"]
                                 + front.tlsArguments(cli: false), timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(front.server.log)")
    }

    /// The same checks pass against redis-server (with an ACL user of the read commands only,
    /// as profiled's read role): when the profiled tests fail and this one passes, profiled is
    /// at fault, not the script or redis-py.
    @Test func redisPyChecksAreRedisBehaviour() throws {
        let redis = try RedisServer(["--requirepass", "w-resp-token",
                                     "--user", "app", "on", ">w-resp-token", "~*", "&*", "+@all",
                                     "--user", "reader", "on", ">r-resp-token", "~*", "+@read", "+@connection"])
        let run = try runCommand(["python3", Self.redisPy, "--port", "\(redis.port)", "--key-prefix", "user:",
                                  "--user", "app", "--token", "w-resp-token",
                                  "--read-user", "reader", "--read-token", "r-resp-token"], timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)")
    }

    static let redisPyClientCache = repositoryPath("Tests/RESPClients/redis_py_client_cache.py")

    /// redis-py's own client cache (`protocol=3, cache_config=CacheConfig()`) on profiled's
    /// CLIENT TRACKING: reads after the first stay in the client, and a write through another
    /// connection, the line protocol, the client itself, DEL and FLUSHALL are all seen.
    @Test func redisPyClientCacheSeesEveryWrite() throws {
        let front = try Front(tokens: false)
        let run = try runCommand(["python3", Self.redisPyClientCache, "--port", "\(front.port)", "--line-port", "\(front.server.port)",
                                  "--key-prefix", "user:"] + front.tlsArguments(cli: false), timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(front.server.log)")
    }

    // MARK: node-redis

    static let nodeRedisScan = repositoryPath("Tests/RESPClients/node_redis_scan.js")

    /// node-redis keeps SCAN's cursor as a JavaScript number, so every cursor must be exact as
    /// a double; its scanIterator walks 300 keys, 10 at a time, and must see each once.
    @Test func nodeRedisScanIteratorSeesEveryKeyOnce() throws {
        let front = try Front(tokens: false)
        let run = try runCommand(["NODE_PATH=/usr/share/nodejs", "node", Self.nodeRedisScan, "\(front.port)", "300"]
                                 + front.tlsArguments(cli: false).dropFirst(), timeoutSeconds: 60)
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(front.server.log)")
    }

    @Test func nodeRedisScanIteratorChecksAreRedisBehaviour() throws {
        let redis = try RedisServer([])
        let run = try runCommand(["NODE_PATH=/usr/share/nodejs", "node", Self.nodeRedisScan, "\(redis.port)"], timeoutSeconds: 60)
        #expect(run.status == 0, "\(run)")
    }

    // MARK: redis-cli

    @Test func redisCliPing() throws {
        let front = try Front(tokens: false)
        let ping = try front.cli(["ping"])
        #expect(ping.status == 0 && ping.stdout == "PONG\n" && ping.stderr.isEmpty, "\(ping)")
    }

    /// `--pipe` sends the whole file without waiting, then an ECHO, and counts the replies.
    /// The 10,000 profiles are then read through the line protocol: one store, two fronts.
    @Test func redisCliPipeOfTenThousandHSETs() throws {
        let front = try Front(tokens: false)
        var requests = ""
        for i in 0..<10_000 {
            let arguments = ["HSET", "user:pipe-\(i)", "name", "Name \(i)", "portraitUri", "https://cdn.example/p/\(i).png"]
            requests += "*\(arguments.count)\r\n" + arguments.map { "$\($0.utf8.count)\r\n\($0)\r\n" }.joined()
        }
        let file = front.server.directory + "/pipe.resp"
        writeText(file, requests)
        let pipe = try front.cli(["--pipe"], stdinPath: file)
        #expect(pipe.status == 0, "\(pipe)")
        #expect(pipe.stdout.contains("errors: 0, replies: 10000"), "\(pipe)")
        let c = try front.server.connect()
        let count = try c.count()
        #expect(count == 10_000)
        let last = try c.get(Array("pipe-9999".utf8))
        #expect(last == Profile(userId: "pipe-9999", name: "Name 9999", portraitUri: "https://cdn.example/p/9999.png"))
    }

    /// Profiles written through the line protocol, found by `redis-cli --scan --pattern`:
    /// each matching key exactly once, no other.
    @Test func redisCliScanWithAPattern() throws {
        let front = try Front(tokens: false)
        let c = try front.server.connect()
        let ids = (0..<1500).map { "scan-\($0)" } + (0..<100).map { "other-\($0)" }
        for start in stride(from: 0, to: ids.count, by: 500) {
            _ = try c.mset(ids[start..<min(start + 500, ids.count)].map { Profile(userId: $0, name: "n", portraitUri: "u") })
        }
        let scan = try front.cli(["--scan", "--pattern", "user:scan-1*"])
        #expect(scan.status == 0, "\(scan)")
        let found = scan.stdout.split(separator: "\n").map(String.init)
        let expected = Set(ids.filter { $0.hasPrefix("scan-1") }.map { "user:" + $0 })
        #expect(found.count == Set(found).count, "keys returned more than once: \(Dictionary(grouping: found) { $0 }.filter { $0.value.count > 1 }.keys.sorted())")
        #expect(Set(found) == expected, "missing: \(expected.subtracting(found).sorted().prefix(10)); not expected: \(Set(found).subtracting(expected).sorted().prefix(10))")
    }

    /// `-3` makes redis-cli say HELLO 3: a hash comes back as a RESP3 map, which redis-cli
    /// prints one field and value to a line (and numbered, with `--no-raw`).
    @Test func redisCliResp3Hgetall() throws {
        let front = try Front(tokens: false)
        let hset = try front.cli(["hset", "user:ann", "name", "Ann Lee", "portraitUri", "https://cdn.example/p/ann.png"])
        #expect(hset.stdout == "2\n", "\(hset)")
        let raw = try front.cli(["-3", "hgetall", "user:ann"])
        #expect(raw.status == 0 && raw.stdout == "name Ann Lee\nportraitUri https://cdn.example/p/ann.png\n", "\(raw)")
        let formatted = try front.cli(["-3", "--no-raw", "hgetall", "user:ann"])
        #expect(formatted.stdout == "1# \"name\" => \"Ann Lee\"\n2# \"portraitUri\" => \"https://cdn.example/p/ann.png\"\n", "\(formatted)")
        let missing = try front.cli(["-3", "--no-raw", "hgetall", "user:nobody"])
        #expect(missing.stdout == "(empty hash)\n", "\(missing)")
        let resp2 = try front.cli(["--no-raw", "hgetall", "user:ann"])
        #expect(resp2.stdout == "1) \"name\"\n2) \"Ann Lee\"\n3) \"portraitUri\"\n4) \"https://cdn.example/p/ann.png\"\n", "\(resp2)")
    }

    /// With `--resp-key-prefix user:` a key without the prefix names no profile: reads find
    /// nothing and writes are refused, and SCAN returns keys with the prefix.
    @Test func redisCliKeysOutsideThePrefixNameNoProfile() throws {
        let front = try Front(tokens: false)
        try front.server.connect().set(Profile(userId: "ann", name: "Ann", portraitUri: "https://cdn.example/p/ann.png"))
        let inside = try front.cli(["hget", "user:ann", "name"])
        #expect(inside.stdout == "Ann\n", "\(inside)")
        for read in [["hget", "ann", "name"], ["hgetall", "ann"], ["exists", "ann"]] {
            let outside = try front.cli(read)
            #expect(outside.stdout == (read[0] == "exists" ? "0\n" : "\n"), "\(read.joined(separator: " ")): \(outside)")
        }
        let write = try front.cli(["hset", "ann", "name", "Bo"])
        #expect(write.stdout.hasPrefix("ERR "), "\(write)")
        let scan = try front.cli(["--scan"])
        #expect(scan.stdout == "user:ann\n", "\(scan)")
        let unchanged = try front.server.connect().get(Array("ann".utf8))
        #expect(unchanged == Profile(userId: "ann", name: "Ann", portraitUri: "https://cdn.example/p/ann.png"))
    }

    /// `-n 1` makes redis-cli send SELECT 1, which profiled refuses as a one-database
    /// redis-server does; redis-cli then reports it and goes on in database 0, the same way
    /// with both servers.
    @Test func redisCliDatabaseOneIsRefused() throws {
        let front = try Front(tokens: false)
        let redis = try RedisServer()
        let fromProfiled = try front.cli(["-n", "1", "ping"])
        let fromRedis = try redisCli(redis.port, ["-n", "1", "ping"])
        #expect(fromProfiled.stderr.contains("SELECT 1 failed: ERR DB index is out of range"), "\(fromProfiled)")
        #expect(fromProfiled.status == fromRedis.status && fromProfiled.stdout == fromRedis.stdout
                && fromProfiled.stderr == fromRedis.stderr, "profiled:\n\(fromProfiled)\nredis-server:\n\(fromRedis)")
    }

    /// `--user NAME -a TOKEN` sends `AUTH NAME TOKEN`; profiled ignores the name and gives the
    /// token's role.
    @Test func redisCliAuthenticatesWithAUserAndAToken() throws {
        let front = try Front(tokens: true)
        func cli(_ token: String, _ arguments: [String]) throws -> CommandOutput {
            try front.cli(["--user", "app", "-a", token, "--no-auth-warning"] + arguments)
        }
        let hset = try cli("w-resp-token", ["hset", "user:ann", "name", "Ann", "portraitUri", "https://cdn.example/p/ann.png"])
        #expect(hset.stdout == "2\n" && hset.stderr.isEmpty, "\(hset)")
        let read = try cli("r-resp-token", ["hget", "user:ann", "name"])
        #expect(read.stdout == "Ann\n", "\(read)")
        let refused = try cli("r-resp-token", ["hset", "user:ann", "name", "Bo"])
        #expect(refused.stdout.hasPrefix("NOPERM User default has no permissions to run the 'hset' command\n"), "\(refused)")
        let wrong = try cli("not-a-token", ["hget", "user:ann", "name"])
        #expect(wrong.stderr.contains("AUTH failed: WRONGPASS invalid username-password pair or user is disabled."), "\(wrong)")
        #expect(wrong.stdout.hasPrefix("NOAUTH Authentication required.\n"), "\(wrong)")
        let after = try cli("a-resp-token", ["hget", "user:ann", "name"])
        #expect(after.stdout == "Ann\n", "\(after)")
    }

    // MARK: redis-benchmark

    /// redis-benchmark with custom commands over `__rand_int__` keys, 16 requests pipelined:
    /// it exits non-zero on any error reply. Every key it wrote is then read through the
    /// line protocol.
    @Test func redisBenchmarkHSETThenHGETALLAndHMGETPipelined() throws {
        let front = try Front(tokens: false)
        let common = ["redis-benchmark", "-h", "127.0.0.1", "-p", "\(front.port)", "-n", "2000", "-c", "4", "-P", "16", "-r", "1000", "-q"]
            + (try front.tlsArguments(cli: true))
        for command in [["HSET", "user:__rand_int__", "name", "x", "portraitUri", "y"],
                        ["HGETALL", "user:__rand_int__"],
                        ["HMGET", "user:__rand_int__", "name", "portraitUri"],
                        ["-3", "HGETALL", "user:__rand_int__"]] {
            let run = try runCommand(common + command, timeoutSeconds: 60)
            #expect(run.status == 0, "\(command.joined(separator: " ")): \(run)")
        }
        let c = try front.server.connect()
        let profiles = try c.scan(after: [], limit: 1000)
        let count = try c.count()
        #expect(!profiles.isEmpty && profiles.count == count, "\(profiles.count) profiles scanned, COUNT \(count)")
        for profile in profiles {
            let id = String(decoding: profile.userId, as: UTF8.self)
            #expect(id.count == 12 && id.allSatisfy(\.isNumber) && Int(id)! < 1000, "\(id)")
            #expect(profile.name == Array("x".utf8) && profile.portraitUri == Array("y".utf8), "\(profile)")
        }
    }
}

/// redis-cli with `arguments`, pointed at 127.0.0.1:`port`.
private func redisCli(_ port: UInt16, _ arguments: [String], stdinPath: String = "/dev/null") throws -> CommandOutput {
    try runCommand(["redis-cli", "-h", "127.0.0.1", "-p", "\(port)"] + arguments, stdinPath: stdinPath, timeoutSeconds: 30)
}
