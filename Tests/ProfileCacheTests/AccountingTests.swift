import ProfileTestSupport
import Testing
@testable import ProfileCache

@Suite struct AccountingTests {
    @Test func bytesStayWithinTheLimitThroughRandomWork() {
        let limit = 32 << 10
        let cache = ProfileCache(limitBytes: limit, shardCount: 4)
        var random = SeededGenerator(seed: 1)
        for step in 0..<20_000 {
            let id = "id\(Int.random(in: 0..<600, using: &random))"
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                cache.store(id, replyLine(id, name: String(repeating: "n", count: Int.random(in: 0..<300, using: &random))))
            case 4:
                cache.store(id, nil)
            default:
                if case .miss(let ticket) = Array(id.utf8).withUnsafeBytes({ key in cache.lookup(key) { $0 } }) {
                    cache.fill(id, Bool.random(using: &random) ? replyLine(id) : nil, ticket)
                }
            }
            if step % 1000 == 0 {
                #expect(cache.statistics.bytes <= limit)
                #expect(cache.integrityViolations() == [])
            }
        }
        let statistics = cache.statistics
        #expect(statistics.bytes <= limit)
        #expect(statistics.evictions > 0)
        #expect(statistics.items > statistics.absentItems)
        #expect(cache.integrityViolations() == [])
    }

    @Test func replacingWithABiggerOrSmallerReplyMovesTheByteCount() {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        cache.store("42", replyLine("42"))
        let small = cache.statistics.bytes
        cache.store("42", replyLine("42", name: String(repeating: "n", count: 500)))
        let big = cache.statistics.bytes
        #expect(cache.seen("42") == .hit(replyLine("42", name: String(repeating: "n", count: 500))))
        // Each block is charged what malloc really gives it, rounded up to 16 bytes.
        #expect((500 - 16)...(500 + 16) ~= big - small)
        cache.store("42", replyLine("42"))
        #expect(cache.statistics.bytes == small)
        #expect(cache.statistics.items == 1)
        #expect(cache.integrityViolations() == [])
    }

    @Test func removeAllReturnsEveryByte() {
        let cache = ProfileCache(limitBytes: 1 << 20)
        for number in 0..<1000 {
            cache.store("id\(number)", number % 3 == 0 ? nil : replyLine("id\(number)"))
        }
        #expect(cache.statistics.bytes > 0)
        cache.removeAll()
        #expect(cache.statistics == CacheStatistics(limitBytes: 1 << 20))
        #expect(cache.seen("id1") == .miss)
        cache.store("id1", replyLine("id1"))
        #expect(cache.seen("id1") == .hit(replyLine("id1")))
    }

    /// The product target: at most 80 bytes per cached profile beyond its payload
    /// (id, name and URI), with every overhead counted: framing, header, malloc
    /// rounding, records and table.
    @Test func aHundredThousandSmallProfilesCostUnder80BytesEachBeyondPayload() {
        let cache = ProfileCache(limitBytes: 256 << 20)
        var payload = 0
        var replyBytes = 0
        let count = 100_000
        for number in 0..<count {
            let id = "u\(number)"
            let name = "n\(number)"
            // Varying lengths meet every malloc rounding.
            let uri = "https://cdn.example/" + String(repeating: "p", count: number % 16) + "/\(number)"
            payload += id.utf8.count + name.utf8.count + uri.utf8.count
            let reply = replyLine(id, name: name, uri: uri)
            replyBytes += reply.utf8.count
            cache.store(id, reply)
        }
        let statistics = cache.statistics
        #expect(statistics.items == count)
        #expect(statistics.evictions == 0)
        let overheadPerProfile = Double(statistics.bytes - payload) / Double(count)
        #expect(overheadPerProfile < 80, "\(overheadPerProfile) bytes per profile beyond payload")
        // And nothing is left out: at least the reply, malloc's size word and a bucket each.
        #expect(statistics.bytes >= replyBytes + count * (8 + MemoryLayout<Bucket>.stride))
    }
}
