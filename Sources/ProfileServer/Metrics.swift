import CLibevent
import Glibc
import ProfileStore
import ProfileSystem
import ProfileTLS

/// How each STATS counter is exposed to Prometheus: name, type and help.
let prometheusNames: [(stat: String, metric: String, type: String, help: String)] = [
    ("uptime_seconds", "profiled_uptime_seconds", "gauge", "Seconds since the server started."),
    ("curr_connections", "profiled_connections", "gauge", "Open client connections, TCP and Unix."),
    ("total_connections", "profiled_connections_accepted_total", "counter", "Client connections accepted since start."),
    ("client_memory_bytes", "profiled_client_memory_bytes", "gauge",
     "Memory client connections hold: input not yet handled, unsent and held replies, queued transactions."),
    ("client_memory_limit_bytes", "profiled_client_memory_limit_bytes", "gauge",
     "The clients' memory limit (--max-client-memory); 0 when there is none."),
    ("client_evictions", "profiled_client_evictions_total", "counter",
     "Client connections closed because the clients' memory went past --max-client-memory."),
    ("tls_handshakes", "profiled_tls_handshakes_total", "counter", "TLS handshakes completed."),
    ("tls_handshake_failures", "profiled_tls_handshake_failures_total", "counter",
     "TLS handshakes that failed: a refused certificate or version, or bytes that were not TLS."),
    ("tls_handshake_timeouts", "profiled_tls_handshake_timeouts_total", "counter",
     "TLS connections closed because their handshake did not finish within --tls-handshake-timeout."),
    ("tls_reload_failures", "profiled_tls_reload_failures_total", "counter",
     "SIGHUP reloads of the TLS certificate, key and CA files that failed (the previous ones stayed)."),
    ("tls_reload_failed", "profiled_tls_reload_failed", "gauge",
     "1 when the last SIGHUP reload of the TLS files failed and older ones are in force, else 0."),
    ("cmd_get", "profiled_lookups_total", "counter", "Ids looked up by GET, MGET and EXISTS."),
    ("get_hits", "profiled_lookup_hits_total", "counter", "Lookups that found a profile."),
    ("get_misses", "profiled_lookup_misses_total", "counter", "Lookups that found no profile."),
    ("cache_hits", "profiled_cache_hits_total", "counter", "Lookups answered from the LRU, remembered absences included."),
    ("cache_misses", "profiled_cache_misses_total", "counter", "Lookups that went to the store."),
    ("cache_evictions", "profiled_cache_evictions_total", "counter", "Entries evicted from the cache."),
    ("cache_small_bytes", "profiled_cache_small_bytes", "gauge",
     "Bytes of the cache's entries in its small queues, where new entries start (a tenth of the limit once full)."),
    ("cache_promotions", "profiled_cache_promotions_total", "counter",
     "Entries moved from a small queue to a main one, for a second use while there."),
    ("cache_ghost_hits", "profiled_cache_ghost_hits_total", "counter",
     "Entries admitted straight to a main queue: ids lately evicted unused from a small queue, read again."),
    ("cache_items", "profiled_cache_items", "gauge", "Entries in the LRU, remembered absences included."),
    ("cache_bytes", "profiled_cache_bytes", "gauge", "Bytes the LRU's entries cost."),
    ("cache_limit_bytes", "profiled_cache_limit_bytes", "gauge", "The LRU's byte limit."),
    ("cmd_set", "profiled_profiles_written_total", "counter", "Profiles written by SET, MSET and UPDATE."),
    ("cmd_del", "profiled_profiles_deleted_total", "counter", "Profiles removed by DEL."),
    ("store_rows", "profiled_store_rows", "gauge", "Profiles in the store."),
    ("errors", "profiled_errors_total", "counter", "ERROR replies sent."),
    ("threads", "profiled_threads", "gauge", "Worker threads."),
    ("loop_moves", "profiled_connection_moves_total", "counter", "Connections handed from one event loop to another."),
    ("unmerged_writes", "profiled_unmerged_writes", "gauge",
     "Writes committed to the write log and not yet merged into the profile table."),
    ("write_buffer_bytes", "profiled_write_buffer_bytes", "gauge",
     "Memory the writes not yet merged into the profile table take."),
    ("write_buffer_limit_bytes", "profiled_write_buffer_limit_bytes", "gauge",
     "The write buffer's limit (--write-buffer-mb); commits slow down past half of it."),
    ("write_delays", "profiled_write_delays_total", "counter",
     "Group commits held back because merging into the profile table fell behind."),
    ("write_delay_ms", "profiled_write_delay_milliseconds_total", "counter",
     "Time group commits were held back, in milliseconds."),
    ("merges", "profiled_merges_total", "counter", "Merges of the write buffer into the profile table."),
    ("merged_rows", "profiled_merged_rows_total", "counter", "Rows merges wrote into the profile table."),
    ("merge_steps_abandoned", "profiled_merge_steps_abandoned_total", "counter",
     "Steps of background merges given up, and run again at once, because writes came to wait for them."),
    ("write_log_syncs", "profiled_write_log_syncs_total", "counter",
     "Syncs of the write log to disk by the once-a-second syncer (--sync normal)."),
    ("invalidations_received", "profiled_invalidations_received_total", "counter",
     "Ids another server's change (or this one's) invalidated, as the shared store's notifications told (--postgres)."),
    ("lease_expired_reads", "profiled_lease_expired_reads_total", "counter",
     "Lookups that bypassed the cache because no fresh heartbeat vouched for it (--postgres)."),
    ("postgres_reconnects", "profiled_postgres_reconnects_total", "counter",
     "Times the listening connection to PostgreSQL was opened again after it was lost (--postgres)."),
    ("tracking_clients", "profiled_tracking_clients", "gauge", "RESP connections with CLIENT TRACKING on."),
    ("tracking_keys", "profiled_tracking_keys", "gauge",
     "Keys client-side caching remembers readers of (at most --tracking-table-max-keys)."),
    ("tracking_invalidations_sent", "profiled_tracking_invalidations_total", "counter",
     "Invalidation pushes made for tracking clients, flushes included."),
]

/// /metrics and /healthz over HTTP/1.1, on the acceptor's event loop.
///
/// Every connection is bounded: at most `maxConnections` at once (past that, accepting waits
/// for one to close), `deadlineSeconds` from accept to the last byte of the reply (an idle
/// or slow client is closed then), and `maxRequestBytes` of request head. One request per
/// connection, answered with `Connection: close`, as Prometheus scrapes and health checks ask.
/// When descriptors run out, accepting pauses with the server's other listeners.
///
/// Used on the main thread only. Neither path runs SQL: formatting reads the workers'
/// published counters, the cache's statistics and the store's counters, and health is what
/// the store last found.
final class MetricsServer {
    static let maxConnections = 32
    static let deadlineSeconds = 5
    static let maxRequestBytes = 8192

    private let base: OpaquePointer
    private let context: ServerContext
    private let listenFDs: [Int32]
    private var listenEvents: [OpaquePointer] = []
    /// Whether the listen events are added: not while the server pauses every listener, nor
    /// while `maxConnections` are open.
    private var listening = false
    private var pausedByServer = false
    private var clients: [Int32: MetricsClient] = [:]
    /// What the server does when accept fails for want of descriptors or memory (it pauses
    /// every listener, this one included), and when an accept succeeds; set before the loop runs.
    var exhausted: (Int32) -> Void = { _ in }
    var accepted: () -> Void = {}
    /// With `--metrics-tls`: the server's TLS context in force, which each new client's
    /// session is made from; nil serves HTTP in clear.
    var tlsContext: () -> TLSContext? = { nil }
    let address: String

    init(base: OpaquePointer, host: String, port: UInt16, context: ServerContext) throws(StartupError) {
        self.base = base
        self.context = context
        do {
            listenFDs = try listenTCP(host: host, port: port, backlog: 128)
        } catch {
            throw StartupError("cannot listen for metrics on \(host):\(port): \(String(cString: strerror(error.code)))")
        }
        address = boundAddress(of: listenFDs[0])
        for fd in listenFDs {
            listenEvents.append(event_new(base, fd, Int16(EV_READ | EV_PERSIST), metricsAcceptReady,
                                          Unmanaged.passUnretained(self).toOpaque()))
        }
        listen(true)
    }

    deinit {
        for client in clients.values { client.release() }
        for event in listenEvents { event_free(event) }
        for fd in listenFDs { close(fd) }
    }

    /// The server's pause of every listener (descriptors ran out), and its end.
    func pause() {
        pausedByServer = true
        listen(false)
    }

    func resume() {
        pausedByServer = false
        listen(clients.count < Self.maxConnections)
    }

    private func listen(_ on: Bool) {
        guard on != listening else { return }
        listening = on
        for event in listenEvents {
            if on { event_add(event, nil) } else { event_del(event) }
        }
    }

    fileprivate func acceptReady(_ listenFD: Int32) {
        // A bounded number per wake-up, as the main listeners.
        for _ in 0..<Self.maxConnections {
            guard clients.count < Self.maxConnections else {
                listen(false)
                return
            }
            let fd: Int32
            switch acceptConnection(listenFD) {
            case .connection(let accepted): fd = accepted
            case .drained: return
            case .exhausted(let error): return exhausted(error)
            case .failed(let error): return Log.warn("metrics accept failed", ["error": String(cString: strerror(error))])
            }
            accepted()
            var tls: TLSSession? = nil
            if let context = tlsContext() {
                guard let session = context.session(fd: fd, accepting: true) else {
                    close(fd)
                    continue
                }
                tls = session
            }
            let client = MetricsClient(fd: fd, tls: tls, deadline: monotonicNanos() + Self.deadlineSeconds * 1_000_000_000,
                                       base: base, server: Unmanaged.passUnretained(self).toOpaque())
            clients[fd] = client
            client.wait(for: EV_READ)
        }
    }

    fileprivate func clientReady(_ fd: Int32, _ what: Int16) {
        guard let client = clients[fd] else { return }
        if what & Int16(EV_TIMEOUT) != 0 || monotonicNanos() >= client.deadline {
            return finish(client)
        }
        // Over TLS the handshake comes first, within the same deadline.
        if client.handshaking, let tls = client.tls {
            switch tls.handshake() {
            case .done: client.handshaking = false
            case .wantRead: return client.wait(for: EV_READ)
            case .wantWrite: return client.wait(for: EV_WRITE)
            case .closed, .failed: return finish(client)
            }
        }
        if client.reply.isEmpty {
            switch client.receive(limit: Self.maxRequestBytes) {
            case .more: return client.wait(for: EV_READ)
            case .closed: return finish(client)
            case .head(let head): client.reply = respond(to: head)
            case .tooLarge: client.reply = Self.reply(431, "Request Header Fields Too Large", "the request head is over 8192 bytes\n")
            }
        }
        if client.send() {
            finish(client)
        } else {
            client.wait(for: EV_WRITE)
        }
    }

    private func finish(_ client: MetricsClient) {
        client.release()
        clients[client.fd] = nil
        if !pausedByServer { listen(true) }
    }

    /// The reply to a request head: GET or HEAD of /metrics or /healthz.
    private func respond(to head: [UInt8]) -> [UInt8] {
        let requestLine = head.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
        let parts = requestLine.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].starts(with: Array("HTTP/1.".utf8)) else {
            return Self.reply(400, "Bad Request", "a request line is METHOD PATH HTTP/1.x\n")
        }
        let method = String(decoding: parts[0], as: UTF8.self)
        guard method == "GET" || method == "HEAD" else {
            return Self.reply(405, "Method Not Allowed", "only GET and HEAD\n", extraHeaders: "Allow: GET, HEAD\r\n")
        }
        let path = String(decoding: parts[1].prefix { $0 != UInt8(ascii: "?") }, as: UTF8.self)
        let headOnly = method == "HEAD"
        switch path {
        case "/metrics":
            return Self.reply(200, "OK", exposition(), contentType: "text/plain; version=0.0.4; charset=utf-8", headOnly: headOnly)
        case "/healthz":
            if let reason = context.store.unreachableReason ?? context.writeRefusal?.reason {
                return Self.reply(503, "Service Unavailable", "store unavailable: \(oneLine(reason))\n", headOnly: headOnly)
            }
            return Self.reply(200, "OK", "ok\n", headOnly: headOnly)
        default:
            return Self.reply(404, "Not Found", "not found: try /metrics or /healthz\n", headOnly: headOnly)
        }
    }

    private static func reply(_ code: Int, _ reason: String, _ body: String, contentType: String = "text/plain",
                              extraHeaders: String = "", headOnly: Bool = false) -> [UInt8] {
        let bytes = Array(body.utf8)
        let head = "HTTP/1.1 \(code) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(bytes.count)\r\n"
            + extraHeaders + "Connection: close\r\n\r\n"
        return Array(head.utf8) + (headOnly ? [] : bytes)
    }

    /// The Prometheus text exposition format, version 0.0.4.
    func exposition() -> String {
        let snapshot = context.snapshot()
        var values: [String: Int] = [:]
        for (name, value) in snapshot.values { values[name.description] = value }
        var text = "# HELP profiled_store_kind The store: sqlite (a file of this server's) or postgres (shared).\n"
        text += "# TYPE profiled_store_kind gauge\nprofiled_store_kind{kind=\"\(snapshot.storeKind)\"} 1\n"
        let refusing = "profiled_store_refusing_writes"
        let refusal = context.writeRefusal?.label
        text += "# HELP \(refusing) 1 for the reason the store refuses writes now (as /healthz answers 503), 0 for the others.\n"
        text += "# TYPE \(refusing) gauge\n"
        for label in WriteRefusal.labels { text += "\(refusing){reason=\"\(label)\"} \(label == refusal ? 1 : 0)\n" }
        for entry in prometheusNames {
            text += "# HELP \(entry.metric) \(entry.help)\n# TYPE \(entry.metric) \(entry.type)\n"
            text += "\(entry.metric) \(values[entry.stat] ?? 0)\n"
        }
        let lag = "profiled_invalidation_lag_seconds"
        text += "# HELP \(lag) Time from a change's commit in the shared store to its invalidation arriving (--postgres).\n"
        text += "# TYPE \(lag) histogram\n"
        var cumulativeLag = 0
        for (i, bound) in SharedStoreStatistics.invalidationLagBounds.enumerated() {
            cumulativeLag += snapshot.shared.invalidationLagBuckets.isEmpty ? 0 : snapshot.shared.invalidationLagBuckets[i]
            text += "\(lag)_bucket{le=\"\(bound)\"} \(cumulativeLag)\n"
        }
        text += "\(lag)_bucket{le=\"+Inf\"} \(snapshot.shared.invalidationLagCount)\n"
        text += "\(lag)_sum \(snapshot.shared.invalidationLagSumSeconds)\n"
        text += "\(lag)_count \(snapshot.shared.invalidationLagCount)\n"
        let metric = "profiled_request_duration_seconds"
        text += "# HELP \(metric) Time from a request's bytes being read to its reply being handed to the socket.\n"
        text += "# TYPE \(metric) histogram\n"
        for kind in RequestKind.allCases {
            var buckets = [Int](repeating: 0, count: LatencyHistograms.bucketCount)
            var count = 0
            var sumNanos = 0
            for worker in context.latency { worker.add(kind, into: &buckets, count: &count, sumNanos: &sumNanos) }
            let label = "command=\"\(kind.metricName)\""
            var cumulative = 0
            for (i, bound) in latencyBucketBounds.enumerated() {
                cumulative += buckets[i]
                text += "\(metric)_bucket{\(label),le=\"\(bound)\"} \(cumulative)\n"
            }
            text += "\(metric)_bucket{\(label),le=\"+Inf\"} \(count)\n"
            text += "\(metric)_sum{\(label)} \(Double(sumNanos) / 1e9)\n"
            text += "\(metric)_count{\(label)} \(count)\n"
        }
        return text
    }
}

private func metricsAcceptReady(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue().acceptReady(fd)
}

private func metricsClientReady(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue().clientReady(fd, what)
}

/// One connection to the metrics listener: its request head as it arrives, then its reply as
/// the socket takes it. The one owner of its socket and event.
///
/// Used on the main thread only.
private final class MetricsClient {
    enum Received {
        case more, closed, tooLarge
        case head([UInt8])
    }

    let fd: Int32
    /// The TLS session bytes pass through (`--metrics-tls`); nil in clear.
    let tls: TLSSession?
    /// The TLS handshake has not finished.
    var handshaking: Bool
    /// Monotonic nanoseconds past which it is closed, whatever it is doing.
    let deadline: Int
    private let base: OpaquePointer
    private let server: UnsafeMutableRawPointer
    /// One-shot: added again, with what is left of the deadline, after each wake-up.
    private var event: OpaquePointer?
    private var eventKind: Int32 = 0
    private var request: [UInt8] = []
    var reply: [UInt8] = []
    private var sent = 0

    init(fd: Int32, tls: TLSSession?, deadline: Int, base: OpaquePointer, server: UnsafeMutableRawPointer) {
        self.fd = fd
        self.tls = tls
        handshaking = tls != nil
        self.deadline = deadline
        self.base = base
        self.server = server
    }

    /// Waits for `what` (EV_READ or EV_WRITE) until the deadline.
    func wait(for what: Int32) {
        if event == nil || eventKind != what {
            if let event { event_free(event) }
            event = event_new(base, fd, Int16(what), metricsClientReady, server)
            eventKind = what
        }
        let remaining = max(0, deadline - monotonicNanos())
        var timeout = timeval(tv_sec: remaining / 1_000_000_000, tv_usec: (remaining % 1_000_000_000) / 1000)
        event_add(event, &timeout)
    }

    /// Reads what has arrived; the head once a blank line ends it.
    func receive(limit: Int) -> Received {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { raw in
                tls?.receive(into: raw.baseAddress!, count: raw.count) ?? recv(fd, raw.baseAddress, raw.count, 0)
            }
            if n == 0 { return .closed }
            if n < 0 {
                if errno == EINTR { continue }
                return errno == EAGAIN || errno == EWOULDBLOCK ? .more : .closed
            }
            request += chunk[0..<n]
            if let end = Self.headEnd(request) { return .head(Array(request[..<end])) }
            if request.count >= limit { return .tooLarge }
        }
    }

    /// Where the head ends: after CR LF CR LF, or LF LF.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "\n") {
                if index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "\n") { return index + 2 }
                if index + 2 < bytes.count && bytes[index + 1] == UInt8(ascii: "\r") && bytes[index + 2] == UInt8(ascii: "\n") {
                    return index + 3
                }
            }
            index += 1
        }
        return nil
    }

    /// Sends what the socket takes; true once the whole reply is sent, or the peer is gone.
    func send() -> Bool {
        while sent < reply.count {
            let n = reply[sent...].withUnsafeBytes { raw in
                tls?.send(raw.baseAddress!, count: raw.count) ?? Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                return !(errno == EAGAIN || errno == EWOULDBLOCK)
            }
            sent += n
        }
        return true
    }

    func release() {
        if let event { event_free(event) }
        event = nil
        tls?.shutdown()
        close(fd)
    }
}
