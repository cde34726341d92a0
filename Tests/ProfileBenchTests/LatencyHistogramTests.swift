import ProfileTestSupport
import Glibc
import Testing
@testable import ProfileBench

@Suite("Latency histogram")
struct LatencyHistogramTests {
    /// Whether `measured` is within 1% of `exact`.
    func close(_ measured: UInt64, _ exact: Double) -> Bool {
        abs(Double(measured) - exact) <= exact * 0.01
    }

    @Test func uniformPercentilesAreWithinOnePercent() {
        var histogram = LatencyHistogram()
        // 1 µs .. 10 ms in 1 µs steps: the p-th percentile is p% of the range.
        for value in stride(from: UInt64(1_000), through: 10_000_000, by: 1_000) { histogram.record(value) }
        #expect(histogram.count == 10_000)
        for p in [50.0, 90.0, 99.0, 99.9] {
            let exact = (p / 100 * 10_000).rounded(.up) * 1_000
            #expect(close(histogram.percentile(p), exact), "p\(p): \(histogram.percentile(p)) vs \(exact)")
        }
        #expect(histogram.min == 1_000)
        #expect(histogram.max == 10_000_000)
        #expect(histogram.percentile(100) == 10_000_000)
    }

    @Test func exponentialPercentilesAreWithinOnePercent() {
        var histogram = LatencyHistogram()
        // Quantiles of an exponential distribution with a 100 µs mean, one per 1/100000.
        let n = 100_000
        for i in 0..<n {
            let q = (Double(i) + 0.5) / Double(n)
            histogram.record(UInt64(-100_000 * log(1 - q)))
        }
        for p in [50.0, 90.0, 99.0, 99.9] {
            let exact = -100_000 * log(1 - p / 100)
            #expect(close(histogram.percentile(p), exact), "p\(p): \(histogram.percentile(p)) vs \(exact)")
        }
    }

    @Test func constantValuesGiveThatValueExactly() {
        var histogram = LatencyHistogram()
        for _ in 0..<1000 { histogram.record(123_456) }
        for p in [0.0, 50, 99.9, 100] { #expect(histogram.percentile(p) == 123_456) }
        #expect(histogram.mean == 123_456)
    }

    @Test func smallValuesAreExact() {
        var histogram = LatencyHistogram()
        for value in UInt64(0)..<256 { histogram.record(value) }
        #expect(histogram.percentile(50) == 127)
        #expect(histogram.percentile(100) == 255)
    }

    @Test func everyBucketHoldsItsOwnRange() {
        for value: UInt64 in [0, 1, 255, 256, 257, 511, 512, 1_000_003, 1 << 40, .max] {
            let bucket = LatencyHistogram.bucket(of: value)
            let (low, width) = LatencyHistogram.range(of: bucket)
            #expect(bucket < LatencyHistogram.bucketCount)
            #expect(low <= value && value - low < width, "\(value) in bucket \(bucket) at \(low)+\(width)")
            #expect(width == 1 || Double(width) / Double(low) <= 1.0 / 128)
        }
    }

    @Test func mergingAddsCountsAndKeepsExtremes() {
        var a = LatencyHistogram()
        var b = LatencyHistogram()
        for _ in 0..<900 { a.record(1_000) }
        for _ in 0..<100 { b.record(50_000) }
        a.merge(b)
        #expect(a.count == 1000)
        #expect(close(a.percentile(90), 1_000))
        #expect(close(a.percentile(91), 50_000))
        #expect(a.min == 1_000 && a.max == 50_000)
    }

    @Test func emptyHistogramReportsZero() {
        let histogram = LatencyHistogram()
        #expect(histogram.percentile(99) == 0)
        #expect(histogram.mean == 0)
    }
}
