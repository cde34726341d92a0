import Testing
@testable import ProfileCache

@Suite struct EvictionTests {
    /// Ids of equal length with equal replies, so every entry costs the same.
    static let ids = (0..<400).map { "user\(1000 + $0)" }

    @Test func leastRecentlyUsedGoFirstAndTouchedEntriesSurvive() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        for id in Self.ids {
            cache.store(id, replyLine(id))
        }
        let statistics = cache.statistics
        #expect(statistics.evictions > 0)
        let resident = statistics.items
        let oldest = Self.ids.count - resident
        #expect(oldest > 0)
        // Exactly the newest `resident` ids are left; looking them up oldest first keeps their order.
        for (position, id) in Self.ids.enumerated() {
            #expect((cache.seen(id) != .miss) == (position >= oldest), "\(id)")
        }

        #expect(cache.seen(Self.ids[oldest]) == .hit(replyLine(Self.ids[oldest])))
        cache.store("user9999", replyLine("user9999"))
        #expect(cache.seen(Self.ids[oldest]) != .miss)
        #expect(cache.seen(Self.ids[oldest + 1]) == .miss)
        #expect(cache.seen("user9999") != .miss)
        #expect(cache.integrityViolations() == [])
    }

    @Test func anEntryLargerThanItsShardIsNotCachedAndEvictsNothing() throws {
        let cache = ProfileCache(limitBytes: 4096, shardCount: 1)
        cache.store("small", replyLine("small"))
        let huge = replyLine("huge", name: String(repeating: "n", count: 5000))
        cache.store("huge", huge)
        #expect(cache.seen("huge") == .miss)
        let ticket = try #require(cache.missTicket("huge"))
        cache.fill("huge", huge, ticket)
        #expect(cache.seen("huge") == .miss)
        #expect(cache.seen("small") == .hit(replyLine("small")))
        #expect(cache.statistics.evictions == 0)
        #expect(cache.integrityViolations() == [])
    }

    @Test func storingAnUncacheableReplyStillRemovesTheOldOne() {
        let cache = ProfileCache(limitBytes: 4096, shardCount: 1)
        cache.store("42", replyLine("42"))
        cache.store("42", replyLine("42", name: String(repeating: "n", count: 5000)))
        #expect(cache.seen("42") == .miss)
        cache.store("43", replyLine("43"))
        cache.store("43", replyLine("43", name: String(repeating: "n", count: 70_000)))
        #expect(cache.seen("43") == .miss)
        #expect(cache.statistics.items == 0)
        #expect(cache.integrityViolations() == [])
    }

    @Test func aFloodOfAbsencesCannotPushOutProfiles() throws {
        let limit = 64 << 10
        let cache = ProfileCache(limitBytes: limit, shardCount: 1)
        let profiles = (0..<100).map { "profile\($0)" }
        for id in profiles {
            cache.store(id, replyLine(id, name: String(repeating: "n", count: 100)))
        }
        for number in 0..<5000 {
            let id = "missing\(number)"
            let ticket = try #require(cache.missTicket(id))
            cache.fill(id, nil, ticket)
        }
        for id in profiles {
            #expect(cache.seen(id) != .miss, "\(id)")
        }
        let statistics = cache.statistics
        #expect(statistics.absentItems > 0)
        #expect(statistics.evictions > 0)
        // Each absence costs at least its block's slab chunk, plus its record and buckets.
        let smallestBlock = BlockSlab.chunkSize(for: EntryBlock.headerSize + EntryBlock.absenceLinksSize + "missing0".utf8.count)
        #expect(statistics.absentItems * (smallestBlock + ShardState.absenceOverhead) <= limit / 4)
        #expect(cache.seen("missing4999") == .absent)
        #expect(cache.seen("missing0") == .miss)
        #expect(cache.integrityViolations() == [])
    }

    @Test func oldestAbsencesGoFirstAndTouchedAbsencesSurvive() {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        for id in Self.ids {
            cache.store(id, nil)
        }
        let resident = cache.statistics.absentItems
        let oldest = Self.ids.count - resident
        #expect(oldest > 0)
        for (position, id) in Self.ids.enumerated() {
            #expect((cache.seen(id) == .absent) == (position >= oldest), "\(id)")
        }

        #expect(cache.seen(Self.ids[oldest]) == .absent)
        cache.store("user9999", nil)
        #expect(cache.seen(Self.ids[oldest]) == .absent)
        #expect(cache.seen(Self.ids[oldest + 1]) == .miss)
        #expect(cache.seen("user9999") == .absent)
        #expect(cache.integrityViolations() == [])
    }

    @Test func evictionsSurviveRemoveAll() {
        let cache = ProfileCache(limitBytes: 8 << 10, shardCount: 1)
        for id in Self.ids {
            cache.store(id, replyLine(id))
        }
        let evictions = cache.statistics.evictions
        #expect(evictions > 0)
        cache.removeAll()
        #expect(cache.statistics.evictions == evictions)
    }
}
