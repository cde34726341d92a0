import ProfileTestSupport
import Testing
@testable import ProfileBench

@Suite("Operation mix")
struct OperationMixTests {
    @Test func parsesWeightsInOrder() throws {
        let mix = try OperationMix.parse("get=90,set=5,mget=5")
        #expect(mix.weights.map(\.operation) == [.get, .set, .mget])
        #expect(mix.weights.map(\.weight) == [90, 5, 5])
        #expect(mix.description == "get=90,set=5,mget=5")
    }

    @Test func everyOperationHasAName() throws {
        let mix = try OperationMix.parse("get=1,mget=1,set=1,update=1,del=1,exists=1,hmget=1,count=1,stats=1,recent=1,scan=1")
        #expect(mix.weights.map(\.operation) == Operation.allCases)
    }

    @Test func zeroWeightsAreDropped() throws {
        let mix = try OperationMix.parse("get=0,set=3")
        #expect(mix.weights.map(\.operation) == [.set])
        #expect(!mix.contains(.get))
    }

    @Test func picksFollowTheWeights() throws {
        let mix = try OperationMix.parse("get=90,set=10")
        var random = RandomSource(seed: 1)
        var sets = 0
        for _ in 0..<100_000 where mix.pick(&random) == .set { sets += 1 }
        #expect((9_000...11_000).contains(sets), "\(sets) sets in 100000 picks")
    }

    @Test(arguments: [
        ("", "--mix is empty: give op=weight pairs, e.g. get=90,set=10"),
        ("get", "--mix: 'get' is not op=weight"),
        ("get=1,,set=1", "--mix: '' is not op=weight"),
        ("put=5", "--mix: unknown operation 'put' (operations: get, mget, set, update, del, exists, hmget, count, stats, recent, scan)"),
        ("GET=5", "--mix: unknown operation 'GET' (operations: get, mget, set, update, del, exists, hmget, count, stats, recent, scan)"),
        ("get=x", "--mix: the weight of get must be a whole number from 0 to 1000000, not 'x'"),
        ("get=-1", "--mix: the weight of get must be a whole number from 0 to 1000000, not '-1'"),
        ("get=1,get=2", "--mix: get is listed twice"),
        ("get=0,set=0", "--mix: the weights add up to 0"),
    ])
    func badMixesSayWhatIsWrong(text: String, message: String) {
        #expect(throws: UsageError(message)) { try OperationMix.parse(text) }
    }
}
