import CLibevent
import Glibc
import ProfileProtocol
import ProfileStore

/// How each STATS counter is exposed to Prometheus: name, type and help.
let prometheusNames: [(stat: String, metric: String, type: String, help: String)] = [
    ("uptime_seconds", "profiled_uptime_seconds", "gauge", "Seconds since the server started."),
    ("curr_connections", "profiled_connections", "gauge", "Open client connections, TCP and Unix."),
    ("total_connections", "profiled_connections_accepted_total", "counter", "Client connections accepted since start."),
    ("cmd_get", "profiled_lookups_total", "counter", "Ids looked up by GET, MGET and EXISTS."),
    ("get_hits", "profiled_lookup_hits_total", "counter", "Lookups that found a profile."),
    ("get_misses", "profiled_lookup_misses_total", "counter", "Lookups that found no profile."),
    ("cache_hits", "profiled_cache_hits_total", "counter", "Lookups answered from the LRU, remembered absences included."),
    ("cache_misses", "profiled_cache_misses_total", "counter", "Lookups that went to the store."),
    ("cache_evictions", "profiled_cache_evictions_total", "counter", "Entries evicted from the LRU."),
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
]

/// /metrics and /healthz over HTTP, with libevent's evhttp on the acceptor's event loop.
///
/// Used on the main thread only. Neither runs SQL: formatting reads the workers' published
/// counters, the cache's statistics and the store's counters, and health is what the store
/// last found.
final class MetricsServer {
    private let http: OpaquePointer
    private let context: ServerContext
    let address: String

    init(base: OpaquePointer, host: String, port: UInt16, context: ServerContext) throws(StartupError) {
        self.context = context
        guard let http = evhttp_new(base) else { throw StartupError("cannot create the metrics HTTP server") }
        self.http = http
        guard let bound = evhttp_bind_socket_with_handle(http, host, port) else {
            evhttp_free(http)
            throw StartupError("cannot listen for metrics on \(host):\(port): \(String(cString: strerror(errno)))")
        }
        address = boundAddress(of: evhttp_bound_socket_get_fd(bound))
        evhttp_set_allowed_methods(http, UInt16(EVHTTP_REQ_GET.rawValue | EVHTTP_REQ_HEAD.rawValue))
        evhttp_set_gencb(http, metricsRequest, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { evhttp_free(http) }

    fileprivate func handle(_ request: OpaquePointer) {
        let uri = String(cString: evhttp_request_get_uri(request))
        let path = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? uri
        switch path {
        case "/metrics":
            send(request, 200, "OK", exposition(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        case "/healthz":
            if let reason = context.shared?.unreachableReason ?? context.writePath.unhealthyReason {
                send(request, 503, "Service Unavailable", "store unavailable: \(oneLine(reason))\n", contentType: "text/plain")
            } else {
                send(request, 200, "OK", "ok\n", contentType: "text/plain")
            }
        default:
            send(request, 404, "Not Found", "not found: try /metrics or /healthz\n", contentType: "text/plain")
        }
    }

    private func send(_ request: OpaquePointer, _ code: Int32, _ reason: String, _ body: String, contentType: String) {
        let headers = evhttp_request_get_output_headers(request)
        evhttp_add_header(headers, "Content-Type", contentType)
        let buffer = evbuffer_new()
        var bytes = Array(body.utf8)
        evbuffer_add(buffer, &bytes, bytes.count)
        evhttp_send_reply(request, code, reason, buffer)
        evbuffer_free(buffer)
    }

    /// The Prometheus text exposition format, version 0.0.4.
    func exposition() -> String {
        let snapshot = context.snapshot()
        var values: [String: Int] = [:]
        for (name, value) in snapshot.values { values[name.description] = value }
        var text = "# HELP profiled_store_kind The store: sqlite (a file of this server's) or postgres (shared).\n"
        text += "# TYPE profiled_store_kind gauge\nprofiled_store_kind{kind=\"\(snapshot.storeKind)\"} 1\n"
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
        for verb in Verb.allCases {
            var buckets = [Int](repeating: 0, count: LatencyHistograms.bucketCount)
            var count = 0
            var sumNanos = 0
            for worker in context.latency { worker.add(verb, into: &buckets, count: &count, sumNanos: &sumNanos) }
            let label = "command=\"\(String(describing: verb.name).lowercased())\""
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

private func metricsRequest(_ request: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    guard let request else { return }
    Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue().handle(request)
}
