import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Several nodes over one PostgreSQL (docs/CLUSTER.md), against the throw-away PostgreSQL of
/// Scripts/test: what a client can rely on, and what happens when the listener, the database
/// or a node fails.
@Suite(.serialized, .enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct ClusterTests {
    /// Starts `count` nodes sharing a fresh database.
    static func nodes(_ count: Int, _ extra: [String] = [], database: String? = nil) throws -> (String, [TestServer]) {
        let database = try database ?? makeTestDatabase()
        return (database, try (0..<count).map { _ in try TestServer(["--postgres", database] + extra) })
    }

    /// Seconds until `condition` holds, polled every millisecond; nil after `limit` seconds.
    static func seconds(until limit: Double, _ condition: () throws -> Bool) rethrows -> Double? {
        let start = monotonicSeconds()
        while monotonicSeconds() - start < limit {
            if try condition() { return monotonicSeconds() - start }
            usleep(1000)
        }
        return nil
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        sorted[min(sorted.count - 1, Int(Double(sorted.count) * p / 100))]
    }

    /// Read-your-writes on the writing node; every other node within the lease, even when its
    /// cache held the older value. Prints how long the others took.
    @Test func everyNodeSeesAWriteWithinTheLease() throws {
        let (_, nodes) = try Self.nodes(3)
        let clients = try nodes.map { try $0.connect() }
        var lags: [Double] = []
        for round in 0..<60 {
            let key = "k\(round % 6)"
            // The others cache the value before: the write must invalidate it.
            for client in clients[1...] { _ = try client.roundTrip("GET \(key)\n") }
            #expect(try clients[0].roundTrip("SET \(key) v\(round) u\n") == "STORED")
            #expect(try clients[0].roundTrip("GET \(key)\n") == "VALUE \(key) v\(round) u")
            for client in clients[1...] {
                let lag = try Self.seconds(until: 3) { try client.roundTrip("GET \(key)\n") == "VALUE \(key) v\(round) u" }
                #expect(lag != nil && lag! < 1.0, "seen after \(String(describing: lag)) s; the lease is 1 s")
                if let lag { lags.append(lag) }
            }
        }
        lags.sort()
        print("cluster propagation over \(lags.count) reads: p50 \(Self.percentile(lags, 50) * 1000) ms, "
              + "p99 \(Self.percentile(lags, 99) * 1000) ms, max \(lags.last! * 1000) ms")
        let stats = Dictionary(uniqueKeysWithValues: try clients[1].stats().map { ($0.name, $0.value) })
        #expect(stats["store_kind"] == "postgres")
        #expect(Int(stats["invalidations_received"] ?? "0")! > 0)
    }

    /// An MGET whose reply reaches the 1 MiB high-water mark is finished as the client reads on
    /// a node too: the node holds about the mark, not the 9.3 MB reply. A profile another node
    /// changes meanwhile is no longer in the cache when its turn comes: the fetchers read the
    /// ids left, and the rest of the reply, in order, has the new value.
    @Test func aSlowReaderOfALargeMGETGetsTheRestFetchedInOrder() throws {
        let (_, nodes) = try Self.nodes(2)
        let writer = try nodes[0].connect()
        try EscapedProfiles.store(through: writer)
        // Read once, so that node 0's cache holds every one.
        writer.sendRaw(EscapedProfiles.mget)
        try writer.flush()
        #expect(try writer.readLines().count == 1000)

        let fd = try rawLoopbackConnection(port: nodes[0].port, receiveBuffer: 4096)
        defer { close(fd) }
        let requests = EscapedProfiles.mget + Array("PING\n".utf8)
        _ = requests.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        usleep(1_000_000)
        let held = Int(try writer.stats().first { $0.name == "client_memory_bytes" }?.value ?? "") ?? .max
        #expect(held <= (1 << 20) + (96 << 10), "the slow reader's connection holds \(held) bytes")
        func invalidationsReceived() throws -> Int {
            Int(try writer.stats().first { $0.name == "invalidations_received" }?.value ?? "") ?? 0
        }
        let received = try invalidationsReceived()
        #expect(try nodes[1].connect().roundTrip("SET esc999 changed u\n") == "STORED")
        // Until node 0 heard of it, however loaded the machine (a fixed 300 ms was too short once).
        for _ in 0..<1000 where try invalidationsReceived() == received { usleep(10_000) }

        let lines = try readLinesUntilPong(fd)
        #expect(lines.count == 1002)
        let expected = EscapedProfiles.ids.dropLast().map(EscapedProfiles.valueLine) + ["VALUE esc999 changed u"]
        let difference = firstDifference(lines, expected)
        #expect(difference == nil, "\(difference ?? "")")
        #expect(lines.suffix(2) == ["END", "PONG"])
    }

    /// A read pipelined behind a write waits for it over PostgreSQL, whatever it reads: its
    /// answer comes from the fetchers, which could bring it back before the write's commit
    /// (held here by a row lock another session takes), and replies keep request order.
    @Test func aReadBehindAWriteIsAnsweredAfterIt() throws {
        let (database, nodes) = try Self.nodes(1)
        let client = try nodes[0].connect()
        #expect(try client.roundTrip("SET a A ua\n") == "STORED")
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let locker = try spawn(try postgresProgram("psql"),
                               args: ["-X", "-q", "-d", database, "-c",
                                      "BEGIN; SELECT 1 FROM profiles WHERE user_id = 'a' FOR UPDATE; SELECT pg_sleep(1.5); COMMIT"],
                               stderrPath: directory + "/psql.err")
        defer {
            var status: Int32 = 0
            while waitpid(locker, &status, 0) < 0 && errno == EINTR {}
        }
        #expect(try Self.seconds(until: 3) {
            // Asleep: the row is locked already.
            try psql(database, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()") == "1"
        } != nil)
        client.sendRaw(Array("SET a A2 ua\nGET nobody\nEXISTS nobody\n".utf8))
        try client.flush()
        #expect(try client.line() == "STORED")
        #expect(try client.line() == "NOTFOUND nobody")
        #expect(try client.line() == "NO")
    }

    /// Another program's plain SQL naming only the three columns reaches every node, and RECENT
    /// counts it as a write.
    @Test func plainSQLReachesEveryNode() throws {
        let (database, nodes) = try Self.nodes(2)
        let clients = try nodes.map { try $0.connect() }
        #expect(try clients[0].roundTrip("SET a A ua\n") == "STORED")
        for client in clients { _ = try client.roundTrip("GET a\n") }
        try psql(database, "INSERT INTO profiles (user_id, name, portrait_uri) VALUES ('b', 'B', 'ub')")
        try psql(database, "UPDATE profiles SET name = 'A2' WHERE user_id = 'a'")
        for client in clients {
            #expect(try Self.seconds(until: 3) { try client.roundTrip("GET a\n") == "VALUE a A2 ua" } != nil)
            #expect(try Self.seconds(until: 3) { try client.roundTrip("GET b\n") == "VALUE b B ub" } != nil)
            #expect(try client.recent(2).map { String(decoding: $0.userId, as: UTF8.self) } == ["a", "b"])
        }
        try psql(database, "DELETE FROM profiles WHERE user_id = 'a'")
        try psql(database, """
            INSERT INTO profiles (user_id, name, portrait_uri) VALUES ('b', 'B2', 'ub')
            ON CONFLICT (user_id) DO UPDATE SET name = EXCLUDED.name
            """)
        for client in clients {
            #expect(try Self.seconds(until: 3) { try client.roundTrip("GET a\n") == "NOTFOUND a" } != nil)
            #expect(try Self.seconds(until: 3) { try client.roundTrip("GET b\n") == "VALUE b B2 ub" } != nil)
            #expect(try client.count() == 1)
        }
        #expect(try clients[1].roundTrip("FLUSHALL\n") == "OK")
        #expect(try Self.seconds(until: 3) { try clients[0].roundTrip("GET b\n") == "NOTFOUND b" } != nil)
    }

    /// The listener's connection ended by the server: the node reconnects, forgets what it may
    /// have missed, and serves nothing older than the lease meanwhile.
    @Test func aTerminatedListenerReconnects() throws {
        let (database, nodes) = try Self.nodes(2, ["--lease-ms", "500"])
        let clients = try nodes.map { try $0.connect() }
        #expect(try clients[0].roundTrip("SET a v1 u\n") == "STORED")
        #expect(try clients[1].roundTrip("GET a\n") == "VALUE a v1 u")
        let terminated = try psql(database, """
            SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE application_name = 'profiled listen' AND datname = current_database()
            """)
        #expect(terminated == "2")
        try psql(database, "UPDATE profiles SET name = 'v2' WHERE user_id = 'a'")
        let lag = try Self.seconds(until: 3) { try clients[1].roundTrip("GET a\n") == "VALUE a v2 u" }
        #expect(lag != nil && lag! < 0.5, "seen after \(String(describing: lag)) s; the lease is 0.5 s")
        #expect(try Self.seconds(until: 5) {
            Int(try clients[1].stats().first { $0.name == "postgres_reconnects" }?.value ?? "0")! >= 1
        } != nil)
        // Back on the cache once a fresh heartbeat came: a write is seen again through invalidation.
        #expect(try clients[0].roundTrip("SET a v3 u\n") == "STORED")
        #expect(try Self.seconds(until: 3) { try clients[1].roundTrip("GET a\n") == "VALUE a v3 u" } != nil)
    }

    /// The listener's backend stopped (a half-open connection): past the lease the node reads
    /// PostgreSQL instead of its cache, and it connects again.
    @Test func aHungListenerIsBypassedAfterTheLease() throws {
        let (database, nodes) = try Self.nodes(2, ["--lease-ms", "300"])
        let clients = try nodes.map { try $0.connect() }
        #expect(try clients[0].roundTrip("SET a v1 u\n") == "STORED")
        #expect(try clients[1].roundTrip("GET a\n") == "VALUE a v1 u")
        let pids = try psql(database, """
            SELECT pid FROM pg_stat_activity WHERE application_name = 'profiled listen' AND datname = current_database()
            """).split(separator: "\n").compactMap { Int32($0) }
        #expect(pids.count == 2)
        for pid in pids { kill(pid, SIGSTOP) }
        defer { for pid in pids { kill(pid, SIGCONT) } }
        try psql(database, "UPDATE profiles SET name = 'v2' WHERE user_id = 'a'")
        let lag = try Self.seconds(until: 3) { try clients[1].roundTrip("GET a\n") == "VALUE a v2 u" }
        #expect(lag != nil && lag! < 0.3 + 0.1, "seen after \(String(describing: lag)) s; the lease is 0.3 s")
        // Stopped past the heartbeat's deadline (the lease), the connection is given up.
        usleep(700_000)
        #expect(try clients[1].roundTrip("GET a\n") == "VALUE a v2 u")
        for pid in pids { kill(pid, SIGCONT) }
        #expect(try Self.seconds(until: 5) {
            let stats = Dictionary(uniqueKeysWithValues: try clients[1].stats().map { ($0.name, $0.value) })
            return Int(stats["postgres_reconnects"] ?? "0")! >= 1
        } != nil)
    }

    /// A node cut off from PostgreSQL's notifications serves its cache for at most the lease:
    /// its last heartbeat was sent before the cut, so no request sent a lease (1 s here) after
    /// the cut is answered from the cache (0.1 s of margin); a node that trusted its cache half
    /// a lease longer answered requests sent 1.2 s after the cut from it.
    @Test func aCutOffNodeStopsAnsweringFromItsCacheWithinTheLease() throws {
        let (database, nodes) = try Self.nodes(2, ["--lease-ms", "1000"])
        let clients = try nodes.map { try $0.connect() }
        // Its first heartbeat back, so that its cache answers until the cut and after it.
        try nodes[1].waitForLease()
        #expect(try clients[0].roundTrip("SET lease v1 u\n") == "STORED")
        // Cached on the node once the SET's own notification has come and gone (it would drop
        // the entry a read filled before it).
        func cacheHits() throws -> Int { Int(try clients[1].stats().first { $0.name == "cache_hits" }?.value ?? "") ?? 0 }
        #expect(try Self.seconds(until: 5) {
            let before = try cacheHits()
            guard try clients[1].roundTrip("GET lease\n") == "VALUE lease v1 u" else { return false }
            return try cacheHits() > before
        } != nil)
        // Changed where no notification reaches the cut-off node: its cache keeps v1 until the lease runs out.
        let pids = try psql(database, """
            SELECT pid FROM pg_stat_activity WHERE application_name = 'profiled listen' AND datname = current_database()
            """).split(separator: "\n").compactMap { Int32($0) }
        #expect(pids.count == 2)
        let cut = monotonicSeconds()
        for pid in pids { kill(pid, SIGSTOP) }
        defer { for pid in pids { kill(pid, SIGCONT) } }
        try psql(database, "UPDATE profiles SET name = 'v2' WHERE user_id = 'lease'")
        // When the last request the cache answered was sent: the node answered it later, so a
        // slow round trip under load cannot make a correct node look late.
        var lastCached = 0.0
        let seen = try Self.seconds(until: 5) {
            let asked = monotonicSeconds() - cut
            let reply = try clients[1].roundTrip("GET lease\n")
            if reply == "VALUE lease v1 u" { lastCached = asked }
            return reply == "VALUE lease v2 u"
        }
        #expect(seen != nil, "the node never read the new value")
        // Heartbeats every quarter lease: the cache went on answering for most of one.
        #expect(lastCached > 0.5, "the cache stopped answering \(lastCached) s after the cut")
        #expect(lastCached < 1.0 + 0.1, "the cache answered a GET sent \(lastCached) s after the node was cut off; the lease is 1 s")
    }

    /// A RESP3 connection with CLIENT TRACKING ON, once the node's lease holds: until a
    /// node's first heartbeat comes back its lease is out, and a tracking client may be told to
    /// flush; the flushes of that start are read here.
    static func trackingClient(_ node: TestServer) throws -> RESPTestClient {
        let client = try node.connectRESP()
        #expect(try client.call("HELLO", "3").hasPrefix("%8\r\n"))
        #expect(try client.call("CLIENT", "TRACKING", "ON") == "+OK\r\n")
        usleep(600_000)
        var reply = try client.call("PING")
        while reply.hasPrefix(">") { reply = try client.reply() }
        #expect(reply == "+PONG\r\n")
        return client
    }

    /// redis-py's own client cache on one node sees another node's write and plain SQL within
    /// the lease, besides everything RESPClientTests checks on one node.
    @Test func redisPyClientCacheSeesEveryNodesWrites() throws {
        let (database, nodes) = try Self.nodes(2, ["--resp-port", "0", "--lease-ms", "500"])
        usleep(600_000)
        var arguments = ["python3", RESPClientTests.redisPyClientCache, "--port", "\(nodes[0].respFrontPort)",
                         "--line-port", "\(nodes[0].port)", "--other-line-port", "\(nodes[1].port)",
                         "--psql", try postgresProgram("psql"), "--sql-conninfo", database, "--lease-seconds", "0.5"]
        if testTransportIsTLS { arguments += ["--tls-ca", try TestCertificates.shared().caCertificate] }
        let run = try runCommand(arguments, timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)\n--- the node's log:\n\(nodes[0].log)")
    }

    /// A RESP client tracking on one node hears of another node's writes and of plain SQL;
    /// when the node's listener hangs, it is told to drop everything within the lease, and
    /// again every lease while it stays so.
    @Test func trackingClientsHearOfEveryChangeAndOfALostLease() throws {
        let (database, nodes) = try Self.nodes(2, ["--resp-port", "0", "--lease-ms", "300"])
        let reader = try Self.trackingClient(nodes[1])
        let invalidateA = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n"
        let flush = ">2\r\n$10\r\ninvalidate\r\n_\r\n"
        #expect(try reader.call("HGET", "a", "name") == "_\r\n")
        #expect(try nodes[0].connect().roundTrip("SET a v1 u\n") == "STORED")
        #expect(try reader.reply() == invalidateA)
        #expect(try reader.call("HGET", "a", "name") == "$2\r\nv1\r\n")
        try psql(database, "UPDATE profiles SET name = 'v2' WHERE user_id = 'a'")
        #expect(try reader.reply() == invalidateA)
        #expect(try reader.call("HGET", "a", "name") == "$2\r\nv2\r\n")
        let pids = try psql(database, """
            SELECT pid FROM pg_stat_activity WHERE application_name = 'profiled listen' AND datname = current_database()
            """).split(separator: "\n").compactMap { Int32($0) }
        #expect(pids.count == 2)
        for pid in pids { kill(pid, SIGSTOP) }
        defer { for pid in pids { kill(pid, SIGCONT) } }
        let stopped = monotonicSeconds()
        #expect(try reader.reply() == flush)
        let first = monotonicSeconds() - stopped
        // The lease is 0.3 s and the watch looks every 30 ms; the last heartbeat was sent at
        // most a quarter of the lease before the stop.
        #expect(first < 0.3 + 0.2, "the first flush came \(first) s after the listener hung")
        // Again when the listener gives the hung connection up and connects anew, or after
        // another lease without a heartbeat, whichever comes first.
        #expect(try reader.reply() == flush)
        let second = monotonicSeconds() - stopped
        #expect(second < 1.5, "the second flush came \(second) s after the listener hung")
    }

    /// Three nodes, two connections each (whose writes a node commits on different
    /// connections of its own), writing MSETs over the same ids in different orders at once:
    /// every write is acknowledged (no deadlock or serialization error reaches a client), and
    /// afterwards every node agrees with the table.
    @Test func concurrentBatchesOverTheSameIdsAllCommit() throws {
        let (database, nodes) = try Self.nodes(3)
        let ids = (0..<40).map { "id\($0)" }
        let failures = Locked<[String]>([])
        nonisolated(unsafe) let shared = nodes
        onThreads(2 * nodes.count) { index in
            do {
                let client = try shared[index % shared.count].connect()
                var generator = SeededGenerator(seed: UInt64(index + 1))
                for round in 0..<40 {
                    let order = ids.shuffled(using: &generator)
                    let reply = try client.roundTrip("MSET " + order.map { "\($0) n\(index)-\(round) u" }.joined(separator: " ") + "\n")
                    if reply != "STORED 40" { failures.withLock { $0.append(reply) } }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        let table = try psql(database, "SELECT user_id || '=' || name FROM profiles ORDER BY user_id")
            .split(separator: "\n").map(String.init)
        #expect(table.count == 40)
        for node in nodes {
            let client = try node.connect()
            #expect(try Self.seconds(until: 3) {
                try ids.sorted().map { id -> String in
                    let reply = try client.roundTrip("GET \(id)\n").split(separator: " ")
                    return "\(id)=\(reply.count > 2 ? reply[2] : "")"
                } == table
            } != nil)
        }
    }

    /// One batch that changes more ids than one notification can carry (8,000 bytes): every id
    /// is invalidated all the same.
    @Test func aBatchLargerThanANotificationInvalidatesEveryId() throws {
        let (_, nodes) = try Self.nodes(2)
        let clients = try nodes.map { try $0.connect() }
        // 1,000 ids of about 20 bytes: 23,000 bytes of ids, where a notification carries 8,000.
        let ids = (0..<1000).map { "user-xxxxxxxxxx-\($0)" }
        #expect(try clients[0].mset(ids.map { Profile(userId: $0, name: "old", portraitUri: "u") }) == 1000)
        // The other node caches them all.
        #expect(try clients[1].mget(ids.map { Array($0.utf8) }).allSatisfy { $0?.name == Array("old".utf8) })
        #expect(try clients[0].mset(ids.map { Profile(userId: $0, name: "new", portraitUri: "u") }) == 1000)
        #expect(try Self.seconds(until: 3) {
            try clients[1].mget(ids.map { Array($0.utf8) }).allSatisfy { $0?.name == Array("new".utf8) }
        } != nil)
    }

    /// PostgreSQL stopped and started again: writes answer ERROR STORE within 5 s and nothing is
    /// acknowledged; past the lease no read is served from the cache; the nodes serve again
    /// without a restart and nothing acknowledged is lost. On a PostgreSQL of its own, since
    /// the others' tests share the main one.
    @Test func aRestartOfPostgreSQLIsRiddenOut() throws {
        let directory = try makeTemporaryDirectory()
        // The server runs as the postgres user when the tests run as root: it must reach the directory.
        chmod(directory, 0o755)
        let script = repositoryPath("Scripts/postgres-for-tests")
        let started = try runToCompletion(script, ["start", directory + "/pg"])
        #expect(started.status == 0, "\(started.output)")
        defer { _ = try? runToCompletion(script, ["stop", directory + "/pg"]) }
        let conninfo = started.output.split(separator: "\n").last.map(String.init) ?? ""
        let (database, nodes) = try Self.nodes(2, ["--lease-ms", "300", "--metrics", "127.0.0.1:0", "--resp-port", "0"],
                                              database: conninfo)
        let clients = try nodes.map { try $0.connect() }
        #expect(try clients[0].roundTrip("SET kept v1 u\n") == "STORED")
        #expect(try clients[1].roundTrip("GET kept\n") == "VALUE kept v1 u")
        let tracking = try Self.trackingClient(nodes[1])
        #expect(try tracking.call("HGET", "kept", "name") == "$2\r\nv1\r\n")

        let halting = monotonicSeconds()
        #expect(try runToCompletion(script, ["halt", directory + "/pg"]).status == 0)
        // A client cache is told to drop everything once the lease is out (at once here: the
        // stop broke the listener's connection), and again every lease while PostgreSQL stays
        // out of reach, since the listener cannot reconnect meanwhile.
        let halted = monotonicSeconds() - halting
        let flush = ">2\r\n$10\r\ninvalidate\r\n_\r\n"
        #expect(try tracking.reply() == flush)
        let first = monotonicSeconds() - halting
        #expect(try tracking.reply() == flush)
        let second = monotonicSeconds() - halting
        #expect(try tracking.reply() == flush)
        let third = monotonicSeconds() - halting
        // The first may have waited for the stop to end before it was read; the later ones
        // are read as they come.
        #expect(first < halted + 0.3 + 0.2 && third - second > 0.25 && third - second < 0.3 + 0.2,
                "flushes \(first), \(second) and \(third) s after the stop began, which took \(halted) s; the lease is 0.3 s")
        let asked = monotonicSeconds()
        // Clients and /healthz get the reason; where PostgreSQL is, and who the node is there,
        // go to the log only.
        let unreachable = "ERROR STORE the shared store cannot be reached"
        #expect(try clients[0].roundTrip("SET lost v u\n") == unreachable)
        #expect(monotonicSeconds() - asked < 5.5)
        #expect(try clients[0].roundTrip("RECENT 5\n") == unreachable)
        #expect(try clients[0].roundTrip("SCAN \"\" 5\n") == unreachable)
        // Past the lease, the cache answers nothing.
        usleep(400_000)
        #expect(try clients[1].roundTrip("GET kept\n") == unreachable)
        let health = try httpGet(port: try metricsPort(nodes[1].log), path: "/healthz")
        #expect(health.status == 503)
        #expect(health.body == "store unavailable: the shared store cannot be reached\n")
        #expect(nodes[0].log.contains(directory + "/pg"), "the log names the server")

        #expect(try runToCompletion(script, ["resume", directory + "/pg"]).status == 0)
        for client in clients {
            #expect(try Self.seconds(until: 10) { try client.roundTrip("GET kept\n") == "VALUE kept v1 u" } != nil)
        }
        #expect(try Self.seconds(until: 10) { try clients[0].roundTrip("SET after v u\n") == "STORED" } != nil)
        #expect(try psql(database, "SELECT string_agg(user_id, ',' ORDER BY user_id) FROM profiles") == "after,kept")
    }

    /// A node killed with SIGKILL under writes loses nothing it acknowledged.
    @Test func aKilledNodeLosesNoAcknowledgedWrite() throws {
        let (database, nodes) = try Self.nodes(1)
        let acknowledged = Locked<[String]>([])
        nonisolated(unsafe) let node = nodes[0]
        onThreads(2) { role in
            if role == 1 {
                usleep(300_000)
                kill(node.pid, SIGKILL)
                return
            }
            guard let client = try? node.connect() else { return }
            for i in 0..<100_000 {
                guard let reply = try? client.roundTrip("SET w\(i) n u\n") else { break }
                if reply == "STORED" { acknowledged.withLock { $0.append("w\(i)") } }
            }
        }
        let written = acknowledged.withLock { $0 }
        #expect(!written.isEmpty)
        let stored = Set(try psql(database, "SELECT user_id FROM profiles").split(separator: "\n").map(String.init))
        #expect(written.allSatisfy { stored.contains($0) })
    }

    /// What stops a start over PostgreSQL: one clear line, a non-zero exit, nothing written.
    @Test func aStartThatCannotUseTheDatabaseSaysWhy() throws {
        let server = try testPostgresConninfo()
        func start(_ arguments: [String]) throws -> (status: Int32, output: String) {
            try runToCompletion(executable("profiled"), ["--port", "0"] + arguments)
        }
        let both = try start(["--postgres", server, "--db", "/nonexistent/p.sqlite3"])
        #expect(both.status == 64)
        #expect(both.output.contains("--postgres and --db"))

        let unreachable = try start(["--postgres", "host=127.0.0.1 port=\(try freeLoopbackPort()) user=postgres dbname=x"])
        #expect(unreachable.status == 1)
        #expect(unreachable.output.contains("cannot connect to PostgreSQL at 127.0.0.1"), "\(unreachable.output)")

        let malformed = try start(["--postgres", "host=/x port=notaport password=secret-word"])
        #expect(malformed.status == 1)
        #expect(!malformed.output.contains("secret-word"), "\(malformed.output)")

        let database = try makeTestDatabase()
        // Roles belong to the whole PostgreSQL server, which other runs share.
        let role = "app_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try psql(database, "CREATE ROLE \(role) LOGIN PASSWORD 'right-one'")
        let port = server.split(separator: " ").first { $0.hasPrefix("port=") }!.dropFirst(5)
        let name = database.split(separator: " ").last { $0.hasPrefix("dbname=") }!.dropFirst(7)
        let wrong = try start(["--postgres", "host=127.0.0.1 port=\(port) user=\(role) password=wrong-one dbname=\(name)"])
        #expect(wrong.status == 1)
        #expect(!wrong.output.contains("wrong-one"), "\(wrong.output)")
        #expect(wrong.output.contains("password"), "\(wrong.output)")

        let foreign = try makeTestDatabase()
        try psql(foreign, "CREATE TABLE profiles (id int, data text)")
        let refused = try start(["--postgres", foreign])
        #expect(refused.status == 1)
        #expect(refused.output.contains("the database has a table profiles (id, data) that profiled did not make"), "\(refused.output)")
        #expect(try psql(foreign, "SELECT count(*) FROM pg_tables WHERE tablename = 'profiled_schema'") == "0")

        let newer = try makeTestDatabase()
        let first = try TestServer(["--postgres", newer])
        #expect(exitCode(first.stop()) == 0)
        try psql(newer, "UPDATE profiled_schema SET version = 99")
        let tooNew = try start(["--postgres", newer])
        #expect(tooNew.status == 1)
        #expect(tooNew.output.contains("version 99, newer than this profiled's"), "\(tooNew.output)")
    }

    /// `--init-schema` prepares a database once, as its owner, and exits; a node whose role has
    /// only the privileges Deploy/README.md grants then serves from it. Without them, the
    /// node's start says PostgreSQL's reason.
    @Test func initSchemaPreparesADatabaseForLeastPrivilegeNodes() throws {
        let server = try testPostgresConninfo()
        let database = try makeTestDatabase()
        let initialize = { try runToCompletion(executable("profiled"), ["--postgres", database, "--init-schema"]) }
        for _ in 0..<2 {
            let run = try initialize()
            #expect(run.status == 0, "\(run.output)")
            #expect(run.output.hasPrefix("profiled: the profiled schema is ready in PostgreSQL at "), "\(run.output)")
            #expect(run.output.split(separator: "\n").count == 1, "\(run.output)")
        }
        #expect(try psql(database, "SELECT count(*) FROM pg_tables WHERE tablename IN ('profiles', 'profiled_schema')") == "2")

        let role = "node_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try psql(database, "CREATE ROLE \(role) LOGIN PASSWORD 'node-secret'")
        let port = server.split(separator: " ").first { $0.hasPrefix("port=") }!.dropFirst(5)
        let name = database.split(separator: " ").last { $0.hasPrefix("dbname=") }!.dropFirst(7)
        let asNode = "host=127.0.0.1 port=\(port) user=\(role) password=node-secret dbname=\(name)"
        let refused = try runToCompletion(executable("profiled"), ["--port", "0", "--postgres", asNode])
        #expect(refused.status == 1)
        #expect(refused.output.contains("permission denied for table profiled_schema"), "\(refused.output)")
        #expect(!refused.output.contains("node-secret"))

        // Reads alone first: the node serves, its writes are refused, and /healthz says why
        // until a write goes through.
        try psql(database, """
            GRANT USAGE ON SCHEMA public TO \(role);
            GRANT SELECT ON profiled_schema TO \(role);
            GRANT SELECT ON profiles TO \(role);
            """)
        let node = try TestServer(["--postgres", asNode, "--metrics", "127.0.0.1:0"])
        let metrics = try metricsPort(node.log)
        let client = try node.connect()
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)
        #expect(try client.roundTrip("SET 42 Ann u\n").hasPrefix("ERROR STORE "))
        let health = try httpGet(port: metrics, path: "/healthz")
        #expect(health.status == 503)
        #expect(health.body.contains("refused the statement (SQLSTATE 42501)"), "\(health.body)")
        try psql(database, """
            GRANT INSERT, UPDATE, DELETE, TRUNCATE ON profiles TO \(role);
            GRANT USAGE ON SEQUENCE profiles_seq TO \(role);
            """)
        #expect(try client.roundTrip("SET 42 Ann u\n") == "STORED")
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)
        #expect(try client.roundTrip("RECENT 1\n") == "VALUE 42 Ann u")
        #expect(try client.line() == "END")
        #expect(try client.roundTrip("FLUSHALL\n") == "OK")
        #expect(try client.roundTrip("COUNT\n") == "COUNT 0")
    }

    /// A node commits on four connections of its own, and each client connection's writes
    /// stay on one of them, in order: eight clients' pipelined writes, then the backends
    /// whose last statement was a COMMIT.
    @Test func aNodeCommitsOnFourConnectionsEachClientsWritesInOrder() throws {
        let (database, nodes) = try Self.nodes(1)
        let clients = try (0..<8).map { _ in try nodes[0].connect() }
        for (index, client) in clients.enumerated() {
            client.sendRaw(Array((0..<20).map { "SET c\(index) v\($0) u\n" }.joined().utf8))
            try client.flush()
            #expect(try (0..<20).map { _ in try client.line() } == Array(repeating: "STORED", count: 20))
        }
        for (index, client) in clients.enumerated() {
            #expect(try client.roundTrip("GET c\(index)\n") == "VALUE c\(index) v19 u")
        }
        let name = try psql(database, "SELECT current_database()")
        #expect(try psql(database, """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = '\(name)' AND application_name = 'profiled' AND query = 'COMMIT'
            """) == "4")
    }

    /// Nodes started together create the schema once, under the advisory lock.
    @Test func nodesStartedTogetherShareOneSchema() throws {
        let database = try makeTestDatabase()
        let servers = Locked<[TestServer]>([])
        onThreads(4) { _ in
            if let server = try? TestServer(["--postgres", database]) {
                servers.withLock { $0.append(server) }
            }
        }
        #expect(servers.withLock { $0.count } == 4)
        #expect(try psql(database, "SELECT count(*) FROM profiled_schema") == "1")
    }
}
