/// What the replies to one kind of request added up to.
///
/// A value type: each load thread keeps its own; the results merge them.
public struct OperationStats: Sendable {
    public var latency = LatencyHistogram()
    /// Replies received.
    public var requests = 0
    /// `ERROR` replies (and memcached's `NOT_STORED`).
    public var errors = 0
    /// Replies saying the id does not exist (GET/UPDATE/DEL `NOTFOUND`, EXISTS `NO`, an empty
    /// HGETALL).
    public var notFound = 0
    /// Ids the answered requests covered (an MGET of 16 counts 16).
    public var keys = 0
    /// Of the ids looked up, those that were found.
    public var hits = 0

    public init() {}

    public mutating func merge(_ other: OperationStats) {
        latency.merge(other.latency)
        requests += other.requests
        errors += other.errors
        notFound += other.notFound
        keys += other.keys
        hits += other.hits
    }
}

/// Index of the preload's statistics next to the operations', and of the warming read's.
let preloadSlot = Operation.allCases.count
let warmSlot = preloadSlot + 1

/// The reply each statistics slot's requests call for.
let expectedReplies: [ExpectedReply] = Operation.allCases.map { operation in
    switch operation {
    case .get: .lookup
    case .mget: .multiLookup
    case .set: .write
    case .update: .update
    case .del: .delete
    case .exists: .exists
    case .hmget: .fields
    case .count: .count
    case .stats, .recent, .scan: .listing
    }
} + [.batchWrite, .multiLookup]
