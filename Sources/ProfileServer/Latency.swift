import Glibc
import Synchronization

/// Upper bounds of the request latency buckets, in seconds (Prometheus `le`).
let latencyBucketBounds: [Double] = [0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5,
                                     0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
private let latencyBucketNanos: [Int] = latencyBucketBounds.map { Int($0 * 1e9) }
private let kindCount = RequestKind.allCases.count
/// One slot per kind of request and bucket, plus +Inf; then per kind a count and a sum of nanoseconds.
private let bucketsPerKind = 19
private let slotCount = 15 * (19 + 2)

/// One worker's request latency histograms, one per kind of request (`RequestKind`).
///
/// Only the owning worker writes (plain load and store, no read-modify-write on the request
/// path); any thread may read, e.g. to format /metrics.
final class LatencyHistograms: Sendable {
    private let slots: InlineArray<315, Atomic<Int>>

    init() {
        precondition(kindCount * (bucketsPerKind + 2) == slotCount && slotCount == 315)
        precondition(latencyBucketNanos.count + 1 == bucketsPerKind)
        slots = InlineArray { _ in Atomic(0) }
    }

    /// Records `count` requests of `kind` that each took `nanos`. Owning worker only.
    func record(_ kind: RequestKind, nanos: Int, count: Int) {
        var bucket = 0
        while bucket < latencyBucketNanos.count && nanos > latencyBucketNanos[bucket] { bucket += 1 }
        let base = Int(kind.rawValue) * (bucketsPerKind + 2)
        bump(base + bucket, by: count)
        bump(base + bucketsPerKind, by: count)
        bump(base + bucketsPerKind + 1, by: nanos * count)
    }

    @inline(__always)
    private func bump(_ slot: Int, by amount: Int) {
        slots[slot].store(slots[slot].load(ordering: .relaxed) + amount, ordering: .relaxed)
    }

    /// Adds this worker's numbers for `kind` into running totals: cumulative-ready bucket
    /// counts (not yet cumulative), count, and sum in nanoseconds.
    func add(_ kind: RequestKind, into buckets: inout [Int], count: inout Int, sumNanos: inout Int) {
        let base = Int(kind.rawValue) * (bucketsPerKind + 2)
        for b in 0..<bucketsPerKind { buckets[b] += slots[base + b].load(ordering: .relaxed) }
        count += slots[base + bucketsPerKind].load(ordering: .relaxed)
        sumNanos += slots[base + bucketsPerKind + 1].load(ordering: .relaxed)
    }

    static var bucketCount: Int { bucketsPerKind }

    /// Requests recorded, of every kind.
    var totalCount: Int {
        var total = 0
        for kind in 0..<kindCount { total += slots[kind * (bucketsPerKind + 2) + bucketsPerKind].load(ordering: .relaxed) }
        return total
    }
}
