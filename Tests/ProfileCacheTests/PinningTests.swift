import Testing
@testable import ProfileCache

/// Entries pinned for writes the store has only in its write log: they must survive any
/// eviction pressure until the store has merged their write and unpins them.
@Suite struct PinningTests {
    static let ids = (0..<400).map { "user\(1000 + $0)" }

    @Test func pinnedEntriesAreNeverEvictedAndUnpinningFreesThem() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        cache.store("pinned-0", replyLine("pinned-0"), pinnedIn: 0)
        cache.store("pinned-1", replyLine("pinned-1"), pinnedIn: 1)
        cache.store("gone", nil, pinnedIn: 0)
        for id in Self.ids { cache.store(id, replyLine(id)) }
        #expect(cache.statistics.evictions > 0)
        #expect(cache.statistics.pinnedItems == 3)
        #expect(cache.seen("pinned-0") == .hit(replyLine("pinned-0")))
        #expect(cache.seen("pinned-1") == .hit(replyLine("pinned-1")))
        #expect(cache.seen("gone") == .absent)
        #expect(cache.integrityViolations() == [])

        // Each unpin says what it let go of, in the bytes the writer counted when pinning.
        #expect(cache.unpin("pinned-0", generation: 0) == .profile(replyCount: replyLine("pinned-0").utf8.count))
        #expect(cache.unpin("gone", generation: 0) == .absence)
        // Pinned in the other generation, or not pinned (any more), or not cached: nothing.
        #expect(cache.unpin("pinned-1", generation: 0) == nil)
        #expect(cache.unpin("pinned-0", generation: 0) == nil)
        #expect(cache.unpin("never-stored", generation: 0) == nil)
        #expect(cache.statistics.pinnedItems == 1)
        #expect(cache.integrityViolations() == [])
        for id in Self.ids { cache.store(id, replyLine(id)) }
        #expect(cache.seen("pinned-0") == .miss)
        #expect(cache.seen("gone") == .miss)
        #expect(cache.seen("pinned-1") == .hit(replyLine("pinned-1")))
        #expect(cache.integrityViolations() == [])
    }

    @Test func pinnedEntriesGoInOverBudgetWhenNothingElseCanBeEvicted() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        var pinned: [String] = []
        for id in Self.ids where cache.statistics.bytes <= cache.limitBytes * 3 / 2 {
            cache.store(id, replyLine(id), pinnedIn: 1)
            pinned.append(id)
        }
        let statistics = cache.statistics
        #expect(statistics.bytes > statistics.limitBytes)
        #expect(statistics.items == pinned.count)
        #expect(statistics.pinnedItems == pinned.count)
        #expect(statistics.evictions == 0)
        for id in pinned { #expect(cache.seen(id) == .hit(replyLine(id))) }
        #expect(cache.integrityViolations() == [])

        // Unpinned, the next admission evicts the shard back under its budget.
        for id in pinned { #expect(cache.unpin(id, generation: 1) != nil) }
        #expect(cache.statistics.pinnedItems == 0)
        cache.store("after", replyLine("after"))
        #expect(cache.statistics.bytes <= cache.limitBytes)
        #expect(cache.seen("after") == .hit(replyLine("after")))
        #expect(cache.integrityViolations() == [])
    }

    @Test func aNewerWriteReplacesAPinnedEntryWithItsOwnPin() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        cache.store("42", replyLine("42", name: "Old"), pinnedIn: 0)
        cache.store("42", replyLine("42", name: "New"), pinnedIn: 1)
        #expect(cache.statistics.pinnedItems == 1)
        // Folding generation 0 must not release the newer write of generation 1.
        #expect(cache.unpin("42", generation: 0) == nil)
        for id in Self.ids { cache.store(id, replyLine(id)) }
        #expect(cache.seen("42") == .hit(replyLine("42", name: "New")))
        #expect(cache.integrityViolations() == [])
    }

    @Test func pinnedAbsencesOutliveTheAbsenceCap() {
        let cache = ProfileCache(limitBytes: 8 << 10, shardCount: 1)
        cache.store("deleted", nil, pinnedIn: 0)
        for id in Self.ids { cache.store(id, nil) }
        #expect(cache.seen("deleted") == .absent)
        #expect(cache.integrityViolations() == [])
    }

    @Test func removeAllDropsPinnedEntriesToo() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 4)
        cache.store("a", replyLine("a"), pinnedIn: 0)
        cache.removeAll()
        #expect(cache.seen("a") == .miss)
        #expect(cache.statistics.pinnedItems == 0)
        #expect(cache.integrityViolations() == [])
    }
}
