/// Latencies in nanoseconds, counted in log-linear buckets: exact below 256 ns, then 128
/// buckets per power of two, so any recorded value is known to within 0.8% (HdrHistogram's
/// scheme with fixed settings). Histograms of different threads merge by adding counts.
///
/// A value type: each load thread records into its own and hands it over when done.
public struct LatencyHistogram: Sendable {
    static let subBucketBits = 7
    static let subBucketCount = 1 << subBucketBits
    /// Every UInt64 has a bucket: indexes 0..<256 hold exact values, then 128 per power of two.
    static let bucketCount = (64 - subBucketBits + 1) * subBucketCount

    private var counts: [UInt64]
    public private(set) var count: UInt64 = 0
    public private(set) var min: UInt64 = .max
    public private(set) var max: UInt64 = 0
    private var sum: Double = 0

    public init() {
        counts = [UInt64](repeating: 0, count: Self.bucketCount)
    }

    @inline(__always)
    static func bucket(of value: UInt64) -> Int {
        if value < UInt64(2 * subBucketCount) { return Int(value) }
        let shift = (63 - value.leadingZeroBitCount) - subBucketBits
        return shift * subBucketCount + Int(value >> UInt64(shift))
    }

    /// The smallest value that falls into `bucket`, and how many values share it.
    static func range(of bucket: Int) -> (low: UInt64, width: UInt64) {
        if bucket < 2 * subBucketCount { return (UInt64(bucket), 1) }
        let shift = bucket / subBucketCount - 1
        let sub = UInt64(bucket - shift * subBucketCount)
        return (sub << UInt64(shift), 1 << UInt64(shift))
    }

    @inline(__always)
    public mutating func record(_ nanoseconds: UInt64) {
        counts[Self.bucket(of: nanoseconds)] &+= 1
        count &+= 1
        sum += Double(nanoseconds)
        if nanoseconds < min { min = nanoseconds }
        if nanoseconds > max { max = nanoseconds }
    }

    public mutating func merge(_ other: LatencyHistogram) {
        guard other.count > 0 else { return }
        for i in 0..<counts.count where other.counts[i] != 0 {
            counts[i] &+= other.counts[i]
        }
        count &+= other.count
        sum += other.sum
        min = Swift.min(min, other.min)
        max = Swift.max(max, other.max)
    }

    public var mean: Double { count == 0 ? 0 : sum / Double(count) }

    /// The value at or below which `percent` of the recorded values lie (0 when empty):
    /// the middle of that value's bucket, kept within the exact minimum and maximum; p100 is the maximum.
    public func percentile(_ percent: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        if percent >= 100 { return max }
        let rank = Swift.max(1, UInt64((percent / 100 * Double(count)).rounded(.up)))
        var seen: UInt64 = 0
        for (bucket, n) in counts.enumerated() where n != 0 {
            seen += n
            if seen >= rank {
                let (low, width) = Self.range(of: bucket)
                return Swift.min(Swift.max(low + (width - 1) / 2, min), max)
            }
        }
        return max
    }
}
