/// What a request does, in the core's own words: what the counters, the latency histograms
/// and /metrics' `command` label count it as. Each front maps its commands onto these (the
/// line protocol one to one, RESP's hash commands onto the lookup or write they are).
///
/// A plain value; any thread may use it.
public enum RequestKind: UInt8, Sendable, CaseIterable {
    case ping, get, mget, set, mset, update, del, exists, count, recent, scan, stats, auth, flushall, quit

    /// The name /metrics labels its histogram with (`command="get"`).
    public var metricName: String {
        switch self {
        case .ping: "ping"
        case .get: "get"
        case .mget: "mget"
        case .set: "set"
        case .mset: "mset"
        case .update: "update"
        case .del: "del"
        case .exists: "exists"
        case .count: "count"
        case .recent: "recent"
        case .scan: "scan"
        case .stats: "stats"
        case .auth: "auth"
        case .flushall: "flushall"
        case .quit: "quit"
        }
    }
}
