import ProfileSystem
import ProfileTestSupport
import Testing
@testable import ProfileCache

/// S3-FIFO as the shards run it (`ShardState`): what a scan, a ghost and a count of uses do, and
/// the whole policy against a reference model of it.
@Suite struct EvictionPolicyTests {
    /// Ids of equal length with equal replies, so every entry costs the same.
    static let ids = (0..<2000).map { "user\(10000 + $0)" }

    static func oneShard() -> ProfileCache { ProfileCache(limitBytes: 16 << 10, shardCount: 1) }

    static func lookUpOrFill(_ cache: ProfileCache, _ id: String) {
        if let ticket = cache.missTicket(id) { cache.fill(id, replyLine(id), ticket) }
    }

    /// Entries used twice stay through a scan of ten times as many ids, each read once; LRU
    /// (and CLOCK, the eviction this replaced) would have lost every one of them.
    @Test func aScanDoesNotEvictTheEntriesInUse() {
        let cache = Self.oneShard()
        let hot = Array(Self.ids[0..<40])
        for _ in 0..<3 { for id in hot { Self.lookUpOrFill(cache, id) } }
        for id in Self.ids[100..<1100] { Self.lookUpOrFill(cache, id) }
        for id in hot { #expect(cache.seen(id) == .hit(replyLine(id)), "\(id)") }
        #expect(cache.statistics.evictions >= 800)
        #expect(cache.statistics.promotions >= hot.count)
        #expect(cache.integrityViolations() == [])
    }

    /// An id evicted unused from the small queue and filled again soon after is remembered by
    /// the ghost and goes straight to the main queue.
    @Test func anIdFilledAgainSoonAfterItsEvictionJoinsTheMainQueue() throws {
        let cache = Self.oneShard()
        let first = Array(Self.ids[0].utf8)
        func cached(_ key: [UInt8]) -> Bool { cache.queuedKeys().contains { $0.small.contains(key) || $0.main.contains(key) } }
        // Fill, never looking any id up again, until the first has been evicted.
        var filled = 0
        repeat {
            Self.lookUpOrFill(cache, Self.ids[filled])
            filled += 1
        } while cached(first)
        #expect(cache.statistics.ghostHits == 0)
        Self.lookUpOrFill(cache, Self.ids[0])
        #expect(cache.statistics.ghostHits == 1)
        let queues = try #require(cache.queuedKeys().first)
        #expect(queues.main.first == Array(Self.ids[0].utf8))
        #expect(!queues.small.contains(Array(Self.ids[0].utf8)))
        // An id never seen before starts in the small queue.
        Self.lookUpOrFill(cache, Self.ids[1999])
        #expect(cache.queuedKeys().first?.small.first == Array(Self.ids[1999].utf8))
        #expect(cache.statistics.ghostHits == 1)
    }

    /// A count of uses stops at 3: ten lookups spare an entry of the main queue three passes of
    /// eviction, not ten.
    @Test func theCountOfUsesStopsAtThree() throws {
        var slab = BlockSlab(pool: PagePool())
        let key = Array("someone".utf8)
        let reply = Array(replyLine("someone").utf8)
        let block = try #require(key.withUnsafeBytes { key in
            reply.withUnsafeBytes { EntryBlock.makeProfile(key: key, profile: encodedProfile($0), in: &slab) }
        })
        #expect(block.frequency == 0)
        for _ in 0..<10 { block.countUse() }
        #expect(block.frequency == EntryBlock.maxFrequency)
        #expect(!block.isInMain)
        block.isInMain = true
        #expect(block.frequency == EntryBlock.maxFrequency && !block.isAbsence)
        block.release(to: &slab)
    }

    /// S3-FIFO by the book, on entries of one size: which entries go, given how many must.
    struct Model {
        let entrySize: Int
        let smallBudget: Int
        let ghostMask: Int
        let hasher: KeyHasher
        var small: [String] = []   // head first
        var main: [String] = []
        var uses: [String: Int] = [:]
        var ghost: [Int: UInt32] = [:]

        func hash(_ id: String) -> UInt64 { Array(id.utf8).withUnsafeBytes { hasher.hash($0) } }
        func slot(_ id: String) -> Int { Int(truncatingIfNeeded: hash(id) >> 32) & ghostMask }
        func fingerprint(_ id: String) -> UInt32 { UInt32(truncatingIfNeeded: hash(id)) | 1 }

        mutating func use(_ id: String) { uses[id] = min(uses[id]! + 1, 3) }

        mutating func evictOne() {
            var passes = 0
            while true {
                if !small.isEmpty && (small.count * entrySize >= smallBudget || main.isEmpty) {
                    let tail = small.removeLast()
                    if uses[tail]! == 0 {
                        uses[tail] = nil
                        ghost[slot(tail)] = fingerprint(tail)
                        return
                    }
                    main.insert(tail, at: 0)
                    continue
                }
                let tail = main.removeLast()
                if uses[tail]! == 0 || passes == ShardState.maxSecondChances {
                    uses[tail] = nil
                    return
                }
                uses[tail]! -= 1
                passes += 1
                main.insert(tail, at: 0)
            }
        }

        /// A fill that made the cache evict `evictions` entries.
        mutating func fill(_ id: String, evictions: Int) {
            let remembered = ghost[slot(id)] == fingerprint(id)
            if remembered { ghost[slot(id)] = 0 }
            for _ in 0..<evictions { evictOne() }
            uses[id] = 0
            if remembered { main.insert(id, at: 0) } else { small.insert(id, at: 0) }
        }
    }

    /// Random lookups, skewed towards some ids, each filled on a miss: after every step, the
    /// cache's queues hold exactly the model's, in the model's order. The cache decides how many
    /// entries must go (its bytes); the model, which.
    @Test(arguments: [1, 2, 3])
    func theQueuesFollowAReferenceModel(seed: UInt64) throws {
        let sizing = Self.oneShard()
        Self.lookUpOrFill(sizing, Self.ids[0])
        let entrySize = sizing.statistics.smallBytes
        // A budget whose tenth is a whole number of entries: the small queue's share is met
        // exactly, so `>=` and `>` evict differently.
        let cache = ProfileCache(limitBytes: 300 * entrySize, shardCount: 1)
        Self.lookUpOrFill(cache, Self.ids[0])
        let budget = cache.limitBytes
        var model = Model(entrySize: entrySize, smallBudget: budget / 10,
                          ghostMask: GhostTable.slotCount(forBudget: budget) - 1, hasher: cache.hasher)
        model.fill(Self.ids[0], evictions: 0)
        var random = SeededGenerator(seed: seed)
        for step in 0..<6000 {
            // Half the lookups among 60 ids, the rest among 600.
            let id = Self.ids[Bool.random(using: &random) ? Int.random(in: 0..<60, using: &random)
                                                          : Int.random(in: 0..<600, using: &random)]
            let evictions = cache.statistics.evictions
            if let ticket = cache.missTicket(id) {
                cache.fill(id, replyLine(id), ticket)
                model.fill(id, evictions: cache.statistics.evictions - evictions)
            } else {
                model.use(id)
            }
            let queues = try #require(cache.queuedKeys().first)
            guard queues.small.map({ String(decoding: $0, as: UTF8.self) }) == model.small,
                  queues.main.map({ String(decoding: $0, as: UTF8.self) }) == model.main else {
                Issue.record("step \(step) (\(id)): the cache's queues differ from the model's")
                return
            }
        }
        let statistics = cache.statistics
        #expect(statistics.evictions > 1000 && statistics.promotions > 100 && statistics.ghostHits > 10)
        #expect(cache.integrityViolations() == [])
    }
}
