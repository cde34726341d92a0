import Testing
@testable import ProfileCache

/// What a committed write does to the cache: it replaces an entry that is cached, leaves an id
/// that is not cached out, and in both cases no read of the store from before it can fill the
/// cache afterwards.
@Suite struct UpdateTests {
    @Test func aWriteReplacesWhatIsCachedAndLeavesOtherIdsOut() {
        let cache = ProfileCache(limitBytes: 1 << 20)
        cache.store("cached", replyLine("cached", name: "old"))
        cache.store("absent", nil)
        cache.update("cached", replyLine("cached", name: "new"))
        cache.update("absent", replyLine("absent"))
        cache.update("uncached", replyLine("uncached"))
        #expect(cache.seen("cached") == .hit(replyLine("cached", name: "new")))
        #expect(cache.seen("absent") == .hit(replyLine("absent")))
        #expect(cache.seen("uncached") == .miss)
        // A removal leaves a remembered absence where the profile was cached.
        cache.update("cached", nil)
        #expect(cache.seen("cached") == .absent)
        #expect(cache.statistics.items == 2)
        #expect(cache.integrityViolations() == [])
    }

    @Test func aFillFromBeforeAWriteIsDroppedWhetherOrNotTheIdWasCached() {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        let ticket = cache.missTicket("slow")!
        // A write to any id of the shard, cached or not, invalidates the outstanding ticket.
        cache.update("other", replyLine("other"))
        cache.fill("slow", replyLine("slow", name: "read before the write"), ticket)
        #expect(cache.seen("slow") == .miss)
        let fresh = cache.missTicket("slow")!
        cache.fill("slow", replyLine("slow", name: "read after"), fresh)
        #expect(cache.seen("slow") == .hit(replyLine("slow", name: "read after")))
    }

    /// A rewrite whose reply takes a chunk of the same size goes over the old block; one that
    /// does not takes a new block. Either way the bytes counted are the bytes held.
    @Test func rewritesOfTheSameSizeGoOverTheOldBlock() {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        cache.store("42", replyLine("42", name: "aaaa"))
        let bytes = cache.statistics.bytes
        cache.update("42", replyLine("42", name: "bbbb"))
        #expect(cache.seen("42") == .hit(replyLine("42", name: "bbbb")))
        #expect(cache.statistics.bytes == bytes)
        // Quoted now: the raw id follows the reply, and the block is larger.
        cache.update("42", replyLine("42", name: "\"b b\" and a much longer name than before"))
        #expect(cache.seen("42") == .hit(replyLine("42", name: "\"b b\" and a much longer name than before")))
        #expect(cache.statistics.bytes > bytes)
        #expect(cache.integrityViolations() == [])
    }

    @Test func aReplyTooLargeToCacheStillRemovesTheOldOne() {
        let cache = ProfileCache(limitBytes: 64 << 10, shardCount: 1)
        cache.store("42", replyLine("42"))
        cache.update("42", replyLine("42", name: String(repeating: "n", count: 70_000)))
        #expect(cache.seen("42") == .miss)
        #expect(cache.integrityViolations() == [])
    }
}
