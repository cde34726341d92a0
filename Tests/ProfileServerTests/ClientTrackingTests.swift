import ProfileTestSupport
import Glibc
import ProfileClient
import Synchronization
import Testing

/// Client-side caching (docs/RESP.md): what RESPDifferentialTests cannot compare with
/// redis-server, because it is profiled's own or needs ids and faults: writes through the line
/// protocol, transactions, a redirect whose client went away, the tracking table's bound, its
/// counters, and a client that stops reading its pushes.
@Suite struct ClientTrackingTests {
    static func push(_ keys: String...) -> String {
        ">2\r\n$10\r\ninvalidate\r\n*\(keys.count)\r\n" + keys.map { "$\($0.utf8.count)\r\n\($0)\r\n" }.joined()
    }

    /// A RESP3 client with CLIENT TRACKING ON and `options`, once the server's cache is vouched
    /// for (a node over PostgreSQL tells tracking clients to drop everything until then).
    static func tracking(_ server: TestServer, _ options: String...) throws -> RESPTestClient {
        try server.waitForLease()
        let client = try server.connectRESP()
        #expect(try client.call("HELLO", "3").hasPrefix("%8\r\n"))
        #expect(try client.call(["CLIENT", "TRACKING", "ON"] + options) == "+OK\r\n")
        return client
    }

    static func stats(_ server: TestServer) throws -> [String: Int] {
        Dictionary(uniqueKeysWithValues: try server.connect().stats().compactMap { stat in Int(stat.value).map { (stat.name, $0) } })
    }

    static let redisPyStaleReads = repositoryPath("Tests/RESPClients/redis_py_stale_reads.py")

    /// A write is acknowledged only once the invalidations it made are on the tracking
    /// connections' sockets, whichever worker holds them: redis-py's client cache, reading a
    /// key at once after another connection's write of it was answered, never reads the old
    /// value, in 1,000 rounds, with one worker and two, whether the write came over RESP or
    /// the line protocol. (Acknowledged before the pushes were sent, 70 of 300 reads were stale.)
    /// In clear, the committing thread sends the pushes itself (`PushOutlet`); over TLS, the
    /// reader's worker does, and the write's answer waits for it.
    @Test(arguments: [(1, "resp", false), (1, "line", false), (2, "resp", false), (2, "line", false),
                      (1, "line", true), (2, "resp", true)])
    func aReadAfterAnAcknowledgedWriteIsNeverStale(threads: Int, writer: String, readerOverTLS: Bool) throws {
        let certificates = try TestCertificates.shared()
        let tls = readerOverTLS ? ["--resp-tls-port", "0", "--tls-cert-file", certificates.serverCertificate,
                                   "--tls-key-file", certificates.serverKey] : []
        let server = try TestServer(["--resp-port", "0", "--threads", "\(threads)"] + tls)
        let resp = readerOverTLS ? ["--port", "\(server.respTLSPort)", "--tls-ca", certificates.caCertificate] : ["--port", "\(server.respPort)"]
        let run = try runCommand(["python3", Self.redisPyStaleReads, "--line-port", "\(server.port)"] + resp
                                 + ["--rounds", "1000", "--writer", writer], timeoutSeconds: 120)
        #expect(run.status == 0, "\(run)")
    }

    /// A push sent straight to a quiet tracking connection by the thread that committed the
    /// change never overtakes a reply whose value was read before it: a client cache that asks
    /// the server only on a miss, as redis-py's does, beside a writer that changes the profile
    /// 3,000 times, never holds a value older than the last write acknowledged. Two workers:
    /// the writes are committed while the reader's worker reads for it. With `readerWrites`, the
    /// reader sends a write of its own before each read, which its read's reply is held behind
    /// (answered ahead of it); over PostgreSQL, a read may be in flight: the push goes out both
    /// before and after such replies.
    @Test(arguments: [false, true])
    func aPushNeverOvertakesAReplyReadBeforeItsChange(readerWrites: Bool) throws {
        // Synced commits keep the reader's write in flight, its read's reply held, for longer.
        let server = try TestServer(["--resp-port", "0", "--threads", "2"] + (readerWrites ? ["--sync", "full"] : []))
        #expect(try server.connect().roundTrip("SET k 0 u\n") == "STORED")
        let writes = readerWrites ? 1000 : 3000
        let acknowledged = Atomic<Int>(0)
        let outcome = Mutex<(stale: Int, misses: Int, failure: String?)>((0, 0, nil))
        // Each used by its own thread only.
        nonisolated(unsafe) let writer = try server.connect()
        nonisolated(unsafe) let reader = try Self.tracking(server)
        onThreads(2) { role in
            do {
                if role == 0 {
                    for value in 1...writes {
                        guard try writer.roundTrip("SET k \(value) u\n") == "STORED" else { throw TestFailure("SET \(value) failed") }
                        acknowledged.store(value, ordering: .sequentiallyConsistent)
                    }
                    return
                }
                var cached: Int? = nil
                var stale = 0, misses = 0
                let widen = 30
                let widening = Array((0..<widen).map { _ in RESPTestClient.multibulk(["HGET", "other", "name"]) }.joined())
                // A push names k, the only key: it drops what the cache holds.
                func take(_ reply: String) throws {
                    if reply.hasPrefix(">") { cached = nil; return }
                    guard let value = Int(reply.split(separator: "\r\n")[1]) else { throw TestFailure("HGET answered \(reply)") }
                    cached = value
                }
                while true {
                    let last = acknowledged.load(ordering: .sequentiallyConsistent)
                    // The pushes of every write acknowledged so far are on the socket.
                    for reply in try reader.arrivedReplies() { try take(reply) }
                    if let value = cached {
                        if value < last {
                            stale += 1
                            cached = nil
                        }
                    } else {
                        misses += 1
                        // Reads of another profile after it keep the pass that read k going.
                        // In one piece: the write is in flight while the read is answered.
                        let write = readerWrites ? RESPTestClient.multibulk(["HSET", "own", "name", "\(misses)"]) : []
                        reader.send(write + RESPTestClient.multibulk(["HGET", "k", "name"]) + widening)
                        if readerWrites {
                            var written = try reader.reply()
                            while written.hasPrefix(">") { written = try reader.reply() }
                            guard written == ":0\r\n" || written == ":1\r\n" else { throw TestFailure("HSET answered \(written)") }
                        }
                        var reply = try reader.reply()
                        while reply.hasPrefix(">") {
                            try take(reply)
                            reply = try reader.reply()
                        }
                        try take(reply)
                        for _ in 0..<widen {
                            reply = try reader.reply()
                            if reply.hasPrefix(">") { try take(reply) }
                        }
                    }
                    if last == writes { break }
                }
                outcome.withLock { $0.stale = stale; $0.misses = misses }
            } catch {
                outcome.withLock { $0.failure = "\(role == 0 ? "writer" : "reader"): \(error)" }
            }
        }
        let (stale, misses, failure) = outcome.withLock { $0 }
        #expect(failure == nil)
        #expect(stale == 0, "\(stale) stale values in the client cache, \(misses) reads from the server")
    }

    /// BCAST's prefixes are matched against keys, `--resp-key-prefix` and all: a client that
    /// tracks `BCAST PREFIX user:a` hears of every change to a userId beginning with `a`, and
    /// of no other.
    @Test func bcastPrefixesNameKeysWithTheKeyPrefix() throws {
        let server = try TestServer(["--resp-port", "0", "--resp-key-prefix", "user:"])
        let reader = try Self.tracking(server, "BCAST", "PREFIX", "user:a")
        let line = try server.connect()
        #expect(try line.roundTrip("SET bob B ub\n") == "STORED")
        #expect(try line.roundTrip("SET ann A ua\n") == "STORED")
        // The first push is ann's: bob's change told this client nothing.
        #expect(try reader.reply() == Self.push("user:ann"))
        #expect(try reader.call("PING") == "+PONG\r\n")
    }

    /// Writes through the line protocol and an EXEC's writes tell the RESP client that read
    /// the profile; an EXEC's reads are remembered like any other; a profile is told of once
    /// per read.
    @Test func everyWriteTellsTheClientsThatReadIt() throws {
        let server = try TestServer(["--resp-port", "0", "--resp-key-prefix", "user:"])
        let reader = try Self.tracking(server)
        let line = try server.connect()
        #expect(try reader.call("HGETALL", "user:a") == "%0\r\n")
        #expect(try line.roundTrip("SET a A ua\n") == "STORED")
        #expect(try reader.reply() == Self.push("user:a"))
        #expect(try line.roundTrip("UPDATE a name A2\n") == "UPDATED")
        #expect(try reader.call("MULTI") == "+OK\r\n")
        #expect(try reader.call("HGET", "user:b", "name") == "+QUEUED\r\n")
        #expect(try reader.call("EXISTS", "user:c", "user:d") == "+QUEUED\r\n")
        #expect(try reader.call("EXEC") == "*2\r\n_\r\n:0\r\n")
        let writer = try server.connectRESP()
        #expect(try writer.call("MULTI") == "+OK\r\n")
        #expect(try writer.call("HSET", "user:e", "name", "E") == "+QUEUED\r\n")
        #expect(try writer.call("HSET", "user:d", "name", "D") == "+QUEUED\r\n")
        #expect(try writer.call("HSET", "user:b", "name", "B") == "+QUEUED\r\n")
        #expect(try writer.call("EXEC") == "*3\r\n:1\r\n:1\r\n:1\r\n")
        #expect(try reader.reply() == Self.push("user:d"))
        #expect(try reader.reply() == Self.push("user:b"))
        #expect(try line.roundTrip("DEL c\n") == "NOTFOUND c")
        #expect(try line.roundTrip("SET c C uc\n") == "STORED")
        #expect(try reader.reply() == Self.push("user:c"))
        // user:a was told of once, and not read again since: nothing more about it.
        #expect(try line.roundTrip("SET a A3 ua\n") == "STORED")
        #expect(try reader.call("PING") == "+PONG\r\n")
        // Its own write: the invalidation comes before the reply, so a client cache that
        // read its own write back never finds the old value.
        #expect(try reader.call("HGET", "user:a", "name") == "$2\r\nA3\r\n")
        #expect(try reader.call("HSET", "user:a", "name", "A4") == Self.push("user:a"))
        #expect(try reader.reply() == ":0\r\n")
        #expect(try line.roundTrip("FLUSHALL\n") == "OK")
        #expect(try reader.reply() == ">2\r\n$10\r\ninvalidate\r\n_\r\n")
    }

    /// A change is told once. A node over PostgreSQL hears of its own commits again when their
    /// notifications come back; those are not told again, so a client that read its own write
    /// back keeps it, and NOLOOP holds.
    @Test func aChangeIsToldOnceThoughItsNotificationComesBack() throws {
        let server = try TestServer(["--resp-port", "0"])
        let reader = try Self.tracking(server, "NOLOOP")
        let writer = try server.connectRESP()
        let line = try server.connect()
        func invalidationsReceived() throws -> Int { try Self.stats(server)["invalidations_received"] ?? 0 }
        /// Over PostgreSQL, waits until the store's notifications of `count` ids in all came back.
        func waitForNotifications(_ count: Int) throws {
            guard server.isOverPostgres else { return }
            for _ in 0..<400 where try invalidationsReceived() < count { usleep(10_000) }
            #expect(try invalidationsReceived() >= count)
        }
        #expect(try reader.call("HGET", "a", "name") == "_\r\n")
        #expect(try reader.call("HSET", "a", "name", "A") == ":1\r\n")
        #expect(try reader.call("HGET", "a", "name") == "$1\r\nA\r\n")
        #expect(try reader.call("HGET", "b", "name") == "_\r\n")
        #expect(try writer.call("HSET", "b", "name", "B") == ":1\r\n")
        #expect(try reader.reply() == Self.push("b"))
        #expect(try reader.call("HGET", "b", "name") == "$1\r\nB\r\n")
        try waitForNotifications(2)
        #expect(try line.roundTrip("FLUSHALL\n") == "OK")
        #expect(try reader.reply() == ">2\r\n$10\r\ninvalidate\r\n_\r\n")
        try waitForNotifications(3)
        #expect(try reader.call("PING") == "+PONG\r\n")
        #expect(try Self.stats(server)["tracking_invalidations_sent"] == 2)
    }

    /// A RESP3 client whose redirect's client has gone is told so when an invalidation is due,
    /// and TRACKINGINFO says `broken_redirect`.
    @Test func aRedirectToAClientThatWentAwayIsReported() throws {
        let server = try TestServer(["--resp-port", "0"])
        var target: RESPTestClient? = try server.connectRESP()
        let id = String(try target!.call("CLIENT", "ID").dropFirst().split(whereSeparator: \.isNewline)[0])
        let reader = try Self.tracking(server, "REDIRECT", id)
        let writer = try server.connectRESP()
        var pushes: [String] = []
        /// The reply to a request, past the pushes that come before it.
        func call(_ arguments: String...) throws -> String {
            reader.send(RESPTestClient.multibulk(arguments))
            while true {
                let reply = try reader.reply()
                guard reply.hasPrefix(">") else { return reply }
                pushes.append(reply)
            }
        }
        target = nil
        // The target's worker sees it close at its own pace: write until the reader is told.
        var info = ""
        for round in 0..<200 where !info.contains("broken_redirect") {
            #expect(try call("HGET", "a", "name").hasPrefix(round == 0 ? "_" : "$"))
            #expect(try writer.call("HSET", "a", "name", "v\(round)") == (round == 0 ? ":1\r\n" : ":0\r\n"))
            usleep(10_000)
            info = try call("CLIENT", "TRACKINGINFO")
        }
        #expect(info.contains("$15\r\nbroken_redirect\r\n"), "\(info)")
        #expect(try call("CLIENT", "GETREDIR") == ":\(id)\r\n")
        // One for each invalidation that found the redirect gone, as Redis does: over PostgreSQL
        // a late heartbeat's flush can add one to the write's.
        #expect(!pushes.isEmpty && pushes.allSatisfy { $0 == ">2\r\n$21\r\ntracking-redir-broken\r\n:\(id)\r\n" }, "\(pushes)")
    }

    /// Past --tracking-table-max-keys, keys leave the table and their readers are told first;
    /// STATS and /metrics count the table, the tracking clients and the pushes.
    @Test func theTrackingTableIsBoundedAndItsEvictionsTellTheReaders() throws {
        let server = try TestServer(["--resp-port", "0", "--tracking-table-max-keys", "10", "--metrics", "127.0.0.1:0"])
        let reader = try Self.tracking(server)
        var told = Set<String>()
        func take(_ reply: String) -> Bool {
            guard reply.hasPrefix(">2\r\n$10\r\ninvalidate\r\n*1\r\n") else { return false }
            told.insert(String(reply.split(separator: "\r\n").last!))
            return true
        }
        for index in 0..<30 {
            reader.send(RESPTestClient.multibulk(["HGET", "k\(index)", "name"]))
            while take(try reader.reply()) {}
        }
        // The evictions' pushes may come after the reply of the read that made them.
        while told.count < 20 { #expect(take(try reader.reply())) }
        #expect(told.count == 20)
        let stats = try Self.stats(server)
        #expect(stats["tracking_keys"] == 10)
        #expect(stats["tracking_clients"] == 1)
        #expect(stats["tracking_invalidations_sent"] == 20)
        let metrics = try scrapeMetrics(metricsPort(server.log))
        #expect(metrics["profiled_tracking_keys"] == "10")
        #expect(metrics["profiled_tracking_clients"] == "1")
        #expect(metrics["profiled_tracking_invalidations_total"] == "20")
        let line = try server.connect()
        for index in 0..<30 { #expect(try line.roundTrip("SET k\(index) n u\n") == "STORED") }
        while told.count < 30 { #expect(take(try reader.reply())) }
        #expect(try reader.call("PING") == "+PONG\r\n")
        #expect(try Self.stats(server)["tracking_keys"] == 0)
        #expect(try reader.call("CLIENT", "TRACKING", "OFF") == "+OK\r\n")
        #expect(try Self.stats(server)["tracking_clients"] == 0)
    }

    /// A BCAST client that never reads: its pushes pile up in its output like any reply, and
    /// past --max-client-memory it is the connection closed.
    @Test func aClientThatStopsReadingItsPushesIsClosed() throws {
        let server = try TestServer(["--resp-port", "0", "--max-client-memory", "1mb"])
        let idle = try Self.tracking(server, "BCAST")
        let writer = try server.connect()
        let name = String(repeating: "n", count: 100)
        var round = 0
        while try Self.stats(server)["client_evictions"] == 0 {
            round += 1
            #expect(round < 500, "the client that reads nothing is still open")
            guard round < 500 else { break }
            let profiles = (0..<100).map { Profile(userId: "\(round)-\($0)-" + String(repeating: "i", count: 100), name: name, portraitUri: "u") }
            _ = try writer.mset(profiles)
        }
        #expect(try Self.stats(server)["tracking_clients"] == 0)
        #expect(try writer.roundTrip("GET 1-0-\(String(repeating: "i", count: 100))\n").hasPrefix("VALUE"))
        _ = idle
    }
}
