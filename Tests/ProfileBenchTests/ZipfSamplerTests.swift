import ProfileTestSupport
import Glibc
import Testing
@testable import ProfileBench

@Suite("Zipf sampler")
struct ZipfSamplerTests {
    /// Draws `draws` ranks and returns how often each came up (index 0 is rank 1).
    func frequencies(count: Int, exponent: Double, draws: Int) -> [Int] {
        let sampler = ZipfSampler(count: count, exponent: exponent)
        var random = RandomSource(seed: 42)
        var seen = [Int](repeating: 0, count: count)
        for _ in 0..<draws {
            let rank = sampler.next(using: &random)
            precondition((1...count).contains(rank), "rank \(rank) out of 1...\(count)")
            seen[rank - 1] += 1
        }
        return seen
    }

    @Test(arguments: [0.5, 0.99, 1.0, 1.5])
    func topRanksFollowThePowerLaw(exponent: Double) {
        let count = 1000
        let draws = 400_000
        let seen = frequencies(count: count, exponent: exponent, draws: draws)
        let norm = (1...count).reduce(0.0) { $0 + pow(Double($1), -exponent) }
        for rank in 1...8 {
            let expected = Double(draws) * pow(Double(rank), -exponent) / norm
            let observed = Double(seen[rank - 1])
            #expect(abs(observed - expected) <= expected * 0.05 + 30,
                    "rank \(rank) at s=\(exponent): \(observed) vs \(expected)")
        }
        #expect(seen.reduce(0, +) == draws)
    }

    @Test func ranksStayInBounds() {
        for count in [1, 2, 3, 17] {
            let seen = frequencies(count: count, exponent: 1.2, draws: 20_000)
            #expect(seen.count == count)
            #expect(seen.allSatisfy { $0 > 0 }, "every rank of \(count) comes up: \(seen)")
        }
        #expect(frequencies(count: 1, exponent: 0.99, draws: 100) == [100])
    }

    @Test func aLargeKeySpaceNeedsNoTable() {
        let sampler = ZipfSampler(count: 100_000_000, exponent: 0.99)
        var random = RandomSource(seed: 7)
        var top = 0
        for _ in 0..<10_000 {
            let rank = sampler.next(using: &random)
            #expect((1...100_000_000).contains(rank))
            if rank == 1 { top += 1 }
        }
        #expect(top > 200, "rank 1 is the most frequent: \(top) of 10000")
    }

    @Test func theSameSeedRepeatsTheSequence() {
        let sampler = ZipfSampler(count: 1000, exponent: 0.99)
        var a = RandomSource(seed: 3)
        var b = RandomSource(seed: 3)
        let first = (0..<100).map { _ in sampler.next(using: &a) }
        let second = (0..<100).map { _ in sampler.next(using: &b) }
        #expect(first == second)
    }
}
