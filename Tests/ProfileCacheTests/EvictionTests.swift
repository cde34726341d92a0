import Testing
@testable import ProfileCache

@Suite struct EvictionTests {
    /// Ids of equal length with equal replies, so every entry costs the same.
    static let ids = (0..<400).map { "user\(1000 + $0)" }

    /// Fills a one-shard cache with `ids` in order until it evicts; returns it and the
    /// index of the oldest id still resident.
    static func filled(absences: Bool = false) -> (cache: ProfileCache, oldest: Int) {
        let cache = ProfileCache(limitBytes: 16 << 10, shardCount: 1)
        for id in ids {
            cache.store(id, absences ? nil : replyLine(id))
        }
        let statistics = cache.statistics
        return (cache, ids.count - (absences ? statistics.absentItems : statistics.items))
    }

    /// Whether exactly the ids at `resident` (and no other of `ids`) are cached.
    static func expectResident(_ cache: ProfileCache, _ resident: Set<Int>, absences: Bool = false) {
        for (position, id) in ids.enumerated() {
            let seen = cache.seen(id)
            let expected: Seen = resident.contains(position) ? (absences ? .absent : .hit(replyLine(id))) : .miss
            #expect(seen == expected, "\(id)")
        }
        #expect(cache.integrityViolations() == [])
    }

    @Test func oldestGoFirstAndALookedUpEntryGetsASecondChance() {
        let (cache, oldest) = Self.filled()
        #expect(cache.statistics.evictions > 0)
        #expect(oldest > 0)
        #expect(cache.seen(Self.ids[oldest]) == .hit(replyLine(Self.ids[oldest])))
        cache.store("user9999", replyLine("user9999"))
        // The looked-up oldest stays; the next oldest, never looked up, went instead.
        Self.expectResident(cache, Set([oldest] + Array(oldest + 2..<Self.ids.count)))
        #expect(cache.seen("user9999") != .miss)
    }

    @Test func prefetchingChangesNothingNotEvenTheEvictionOrder() {
        let (cache, _) = Self.filled()
        cache.store("gone", nil)
        // The absence may have evicted a profile of its own.
        let oldest = Self.ids.count - (cache.statistics.items - cache.statistics.absentItems)
        let before = cache.statistics
        cache.prefetch([Self.ids[oldest], Self.ids[oldest + 1], Self.ids[0], "gone", "", String(repeating: "a", count: 300)]
            .map { Array($0.utf8) })
        #expect(cache.statistics == before)
        cache.store("user9999", replyLine("user9999"))
        // Unlike a lookup (above), a prefetch gives the oldest no second chance.
        Self.expectResident(cache, Set(oldest + 1..<Self.ids.count))
    }

    @Test func oneEvictionGivesAtMostMaxSecondChances() {
        let (cache, oldest) = Self.filled()
        let chances = ShardState.maxSecondChances
        #expect(Self.ids.count - oldest > chances + 1)
        for id in Self.ids[oldest...] { _ = cache.seen(id) }
        let evictions = cache.statistics.evictions
        cache.store("user9999", replyLine("user9999"))
        #expect(cache.statistics.evictions == evictions + 1)
        // Every entry was looked up: the oldest `chances` are passed over, the next one goes.
        Self.expectResident(cache, Set(oldest..<Self.ids.count).subtracting([oldest + chances]))
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

    @Test func oldestAbsencesGoFirstAndALookedUpAbsenceGetsASecondChance() {
        let (cache, oldest) = Self.filled(absences: true)
        #expect(oldest > 0)
        #expect(cache.seen(Self.ids[oldest]) == .absent)
        cache.store("user9999", nil)
        Self.expectResident(cache, Set([oldest] + Array(oldest + 2..<Self.ids.count)), absences: true)
        #expect(cache.seen("user9999") == .absent)
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
