import CPrefetch
import Glibc
import ProfileSystem

/// One shard of the cache: its hash table, entry records, eviction queues, byte
/// accounting and fill epoch.
///
/// Eviction is S3-FIFO's (Yang et al., SOSP 2023), which keeps more of a skewed workload's
/// popular ids than LRU and lets a scan of ids read once pass through: a new entry joins a
/// small queue (a tenth of the budget); one evicted from there without a second use leaves
/// only its fingerprint in a ghost table, while one used there moves to the main queue. The
/// main queue evicts like CLOCK, with a count of uses (to 3) instead of one bit, each pass of
/// eviction taking one back. An id filled while the ghost remembers it joins the main queue.
/// A hit only counts a use: nothing moves, no list is touched.
///
/// Every method must be called with the shard's lock held.
@usableFromInline
struct ShardState: ~Copyable {
    /// What an absence is charged against its cap beyond its block: its record and
    /// two buckets, its share of a table kept between three eighths and three quarters full.
    static let absenceOverhead = MemoryLayout<EntryRecord>.stride + 2 * MemoryLayout<Bucket>.stride

    let index: UInt32
    let hasher: KeyHasher
    let budget: Int
    /// Remembered absences may take at most this much, so a flood of lookups of
    /// missing ids cannot push the real profiles out.
    let absenceBudget: Int
    /// Bumped by every authoritative change; a fill whose ticket carries an older epoch is dropped.
    private(set) var epoch: UInt64

    private var table: BucketTable
    /// Where the entries' blocks live.
    private var slab: BlockSlab
    private var records: EntryRecords
    /// New entries, oldest at the tail; `smallBytes` of blocks, at most `smallBudget` once
    /// eviction runs.
    private var small = RecencyList()
    /// Entries used while in `small`, or filled while the ghost remembered them; eviction
    /// moves the used ones at the tail to the head (see `evictionVictim`).
    private var main = RecencyList()
    private var ghost: GhostTable
    let smallBudget: Int
    /// The absences alone, most recently used first, to evict the oldest when over their cap.
    private var absences = RecencyList()

    /// Blocks, records and table together: what the shard really holds.
    private(set) var bytes = 0
    private(set) var absenceBytes = 0
    private(set) var items = 0
    private(set) var absentItems = 0
    private(set) var evictions = 0
    private(set) var smallBytes = 0
    /// Entries moved to the main queue for a use while in the small one.
    private(set) var promotions = 0
    /// Fills the ghost remembered, admitted to the main queue.
    private(set) var ghostHits = 0

    init(index: UInt32, hasher: KeyHasher, budget: Int, pool: PagePool, epoch: UInt64 = 0) {
        self.index = index
        self.slab = BlockSlab(pool: pool)
        self.table = BucketTable(pool: pool)
        self.records = EntryRecords(pool: pool)
        self.hasher = hasher
        self.budget = budget
        self.absenceBudget = budget / 4
        self.smallBudget = budget / 10
        self.ghost = GhostTable(budget: budget)
        self.epoch = epoch
    }

    deinit {
        // The slab's pages go with it; blocks too large for a chunk were malloc'd one by one.
        for entry in 0..<records.initialized {
            if let base = records[UInt32(entry)].block, BlockSlab.chunkSize(for: EntryBlock(base).byteCount) == 0 {
                free(base)
            }
        }
    }

    /// Empties the shard and hands back its old contents, for the caller to free outside
    /// the lock. The new epoch invalidates every ticket issued so far; the eviction count
    /// carries over, as STATS counters do.
    mutating func removeAll() -> ShardState {
        var retired = ShardState(index: index, hasher: hasher, budget: budget, pool: slab.pool, epoch: epoch &+ 1)
        retired.evictions = evictions
        retired.promotions = promotions
        retired.ghostHits = ghostHits
        swap(&self, &retired)
        return retired
    }

    @usableFromInline @inline(__always)
    mutating func lookup(_ key: UnsafeRawBufferPointer, hash: UInt64) -> CacheLookup {
        guard let found = find(key, hash: hash) else {
            return .miss(FillTicket(shard: index, epoch: epoch))
        }
        let block = EntryBlock(records[found.entry].block!)
        // Counted, not moved: relinking touches two more records at random places in memory.
        block.countUse()
        return block.isAbsence ? .absent : .hit(block.profile)
    }

    // The stages of `ProfileCache.prefetch` that read the shard, each starting the load the
    // next one reads (the first, the bucket's, reads only the published `BucketHome`).

    /// Where the table's buckets are now, for `BucketHome`.
    var bucketHome: (base: Int, mask: Int) { table.home }

    /// Starts loading the record of the likely match for `hash` and returns its index.
    @inline(__always)
    func prefetchRecord(hash: UInt64) -> UInt32 {
        let entry = table.firstCandidate(UInt32(truncatingIfNeeded: hash))
        if entry != .noEntry { records.prefetch(entry) }
        return entry
    }

    /// Starts loading the first lines of `entry`'s block: its header and key, and the reply a
    /// hit copies (a typical profile's reply fits in the first 128 bytes; a longer one misses
    /// for its tail).
    @inline(__always)
    func prefetchBlock(entry: UInt32) {
        guard let block = records.blockIfInUse(entry) else { return }
        profiled_prefetch(block)
        profiled_prefetch(block + 64)
        profiled_prefetch(block + 128)
    }

    /// Adds `profile` (an absence when nil) unless the epoch moved since `ticketEpoch` or the
    /// key is already cached (then by a fill of the same epoch, which read the same row).
    mutating func fill(_ key: UnsafeRawBufferPointer, hash: UInt64, profile: EncodedProfile?,
                       ticketEpoch: UInt64) {
        guard ticketEpoch == epoch, find(key, hash: hash) == nil, let block = makeBlock(key, profile: profile) else {
            return
        }
        let wantedAgain = ghost.takeBack(hash: hash)
        if wantedAgain { ghostHits += 1 }
        admit(block, hash: hash, toMain: wantedAgain)
    }

    private mutating func makeBlock(_ key: UnsafeRawBufferPointer, profile: EncodedProfile?) -> EntryBlock? {
        if let profile {
            return EntryBlock.makeProfile(key: key, profile: profile, in: &slab)
        }
        return EntryBlock.makeAbsence(key: key, in: &slab)
    }

    /// Replaces whatever is cached for `key` with `profile` (an absence when nil), or just
    /// removes it when no block can hold it (a reply too large to cache must still not leave
    /// the old one behind); a key not cached stays so. Invalidates every outstanding ticket of
    /// the shard either way.
    mutating func update(_ key: UnsafeRawBufferPointer, hash: UInt64, profile: EncodedProfile?) {
        epoch &+= 1
        guard let found = find(key, hash: hash) else { return }
        // A rewrite of the same size goes over the old block: nothing to free, link or account.
        let old = EntryBlock(records[found.entry].block!)
        if let profile, old.overwrite(key: key, profile: profile) { return }
        // The new value keeps the old one's place in eviction's queues.
        let (wasInMain, frequency) = (old.isInMain, old.frequency)
        remove(found)
        if let block = makeBlock(key, profile: profile) {
            block.frequency = frequency
            admit(block, hash: hash, toMain: wasInMain)
        }
    }

    /// Forgets whatever is cached for `key`, and invalidates every outstanding ticket of the
    /// shard, so that no read from before can put it back.
    mutating func invalidate(_ key: UnsafeRawBufferPointer, hash: UInt64) {
        epoch &+= 1
        guard let found = find(key, hash: hash) else { return }
        remove(found)
    }

    private var queueLinks: RecencyLinks { RecencyLinks(records: records.base!) }
    private var absenceLinks: AbsenceLinks { AbsenceLinks(records: records.base!) }

    // Inlined: called on its own, it took a copy of the whole shard state for each lookup.
    @inline(__always)
    private func find(_ key: UnsafeRawBufferPointer, hash: UInt64) -> (position: Int, entry: UInt32)? {
        table.find(UInt32(truncatingIfNeeded: hash)) { entry in
            EntryBlock(records[entry].block!).hasKey(key)
        }
    }

    /// Links `block` in at the head of the small queue, or of the main one, evicting entries as
    /// needed; drops it when it cannot fit even in an otherwise empty shard.
    private mutating func admit(_ block: EntryBlock, hash: UInt64, toMain: Bool) {
        let cost = block.footprint
        let absenceCharge = cost + Self.absenceOverhead
        guard cost <= budget - table.footprint - records.footprint
                && (!block.isAbsence || absenceCharge <= absenceBudget) else {
            block.release(to: &slab)
            return
        }
        if block.isAbsence {
            while absenceBytes + absenceCharge > absenceBudget {
                let links = absentItems > 0 ? absenceLinks : nil
                guard let links, let victim = Self.oldestAbsence(in: &absences, links, records: records.base!) else {
                    block.release(to: &slab)
                    return
                }
                evict(victim)
            }
        }
        guard makeRoom(for: cost) else {
            block.release(to: &slab)
            return
        }
        let entry = records.claim(for: block.base)
        table.insert(hash: UInt32(truncatingIfNeeded: hash), entry: entry)
        block.isInMain = toMain
        if toMain {
            main.pushFront(entry, queueLinks)
        } else {
            small.pushFront(entry, queueLinks)
            smallBytes += cost
        }
        items += 1
        bytes += cost
        if block.isAbsence {
            absences.pushFront(entry, absenceLinks)
            absentItems += 1
            absenceBytes += absenceCharge
        }
    }

    /// Evicts entries until a block of `cost` bytes fits, growing the table or the records
    /// first when they are full and the growth itself fits. The first eviction makes the ghost
    /// table first: a shard that never fills needs none.
    private mutating func makeRoom(for cost: Int) -> Bool {
        while true {
            if table.needsGrowth(toHold: items + 1) {
                if bytes - table.footprint + table.footprintAfterGrowth + cost <= budget {
                    bytes -= table.footprint
                    table.grow()
                    bytes += table.footprint
                    continue
                }
            } else if records.isFull {
                if bytes - records.footprint + records.footprintAfterGrowth + cost <= budget {
                    bytes -= records.footprint
                    records.grow()
                    bytes += records.footprint
                    continue
                }
            } else if bytes + cost <= budget {
                return true
            }
            if !ghost.isMade && items > 0 && ghost.footprintWhenMade <= budget / 32 {
                ghost.make()
                bytes += ghost.footprint
                continue
            }
            guard items > 0, let victim = evictionVictim() else { return false }
            evict(victim)
        }
    }

    /// How many used entries at the main queue's tail one eviction passes over (each a use
    /// taken back) before it takes the tail whatever its count: bounds the time an eviction
    /// holds the shard's lock.
    static let maxSecondChances = 32

    /// The entry to evict next, as S3-FIFO picks it. While the small queue holds its share of
    /// the budget (or the main queue is empty): its tail, if never used since it came in;
    /// a used one moves to the main queue instead (each entry does so at most once a stay, so
    /// these moves cost O(1) an admission). Otherwise: the main queue's tail if its count is 0;
    /// a counted one goes back to the head, one use taken back, up to `maxSecondChances` times.
    private mutating func evictionVictim() -> UInt32? {
        let links = queueLinks
        var secondChances = 0
        while true {
            if small.tail != .noEntry && (smallBytes >= smallBudget || main.tail == .noEntry) {
                let tail = small.tail
                let block = EntryBlock(records[tail].block!)
                if block.frequency == 0 { return tail }
                small.remove(tail, links)
                smallBytes -= block.footprint
                block.isInMain = true
                main.pushFront(tail, links)
                promotions += 1
                continue
            }
            let tail = main.tail
            guard tail != .noEntry else { return nil }
            let block = EntryBlock(records[tail].block!)
            guard block.frequency > 0 && secondChances < Self.maxSecondChances else { return tail }
            block.frequency -= 1
            secondChances += 1
            main.moveToFront(tail, links)
        }
    }

    /// The oldest absence, passing over (and moving to the head) up to `maxSecondChances` used
    /// ones, each a use taken back.
    private static func oldestAbsence(in list: inout RecencyList, _ links: some EntryLinks,
                                      records: UnsafeMutablePointer<EntryRecord>) -> UInt32? {
        var secondChances = 0
        while list.tail != .noEntry {
            let tail = list.tail
            let block = EntryBlock(records[Int(tail)].block!)
            guard block.frequency > 0 && secondChances < maxSecondChances else { return tail }
            block.frequency -= 1
            secondChances += 1
            list.moveToFront(tail, links)
        }
        return nil
    }

    /// Removes an entry to make room; one leaving the small queue is remembered by the ghost.
    private mutating func evict(_ entry: UInt32) {
        let block = EntryBlock(records[entry].block!)
        let hash = hasher.hash(block.key)
        if !block.isInMain { ghost.remember(hash: hash) }
        let found = table.find(UInt32(truncatingIfNeeded: hash)) { $0 == entry }!
        remove(found)
        evictions += 1
    }

    private mutating func remove(_ found: (position: Int, entry: UInt32)) {
        let block = EntryBlock(records[found.entry].block!)
        let cost = block.footprint
        table.remove(at: found.position)
        if block.isInMain {
            main.remove(found.entry, queueLinks)
        } else {
            small.remove(found.entry, queueLinks)
            smallBytes -= cost
        }
        if block.isAbsence {
            absences.remove(found.entry, absenceLinks)
            absentItems -= 1
            absenceBytes -= cost + Self.absenceOverhead
        }
        items -= 1
        bytes -= cost
        records.release(found.entry)
        block.release(to: &slab)
    }
}

extension ShardState {
    /// The keys of the entries in the small queue and in the main one, each from head to tail,
    /// counting no use. For tests.
    func queuedKeys() -> (small: [[UInt8]], main: [[UInt8]]) {
        func keys(_ list: RecencyList) -> [[UInt8]] {
            var keys: [[UInt8]] = []
            var entry = list.head
            while entry != .noEntry {
                keys.append(Array(EntryBlock(records[entry].block!).key))
                entry = records[entry].next
            }
            return keys
        }
        return (keys(small), keys(main))
    }

    /// Every way the shard's structures must agree with one another, as readable
    /// failures; empty when all is well. For tests: it walks the whole shard.
    func integrityViolations() -> [String] {
        var violations: [String] = []
        func check(_ condition: Bool, _ message: @autoclosure () -> String) {
            if !condition { violations.append("shard \(index): \(message())") }
        }
        var seen = Set<UInt32>()
        var blockBytes = 0
        var smallSeen = 0
        var absenceCharges = 0
        var absentSeen = 0
        for (name, list, inMain) in [("small", small, false), ("main", main, true)] {
            var previous = UInt32.noEntry
            var entry = list.head
            while entry != .noEntry {
                guard Int(entry) < records.initialized, seen.insert(entry).inserted,
                      let base = records[entry].block else {
                    violations.append("shard \(index): \(name) queue is corrupt at entry \(entry)")
                    return violations
                }
                let block = EntryBlock(base)
                check(records[entry].previous == previous, "entry \(entry) has a wrong previous link")
                check(block.isInMain == inMain, "entry \(entry) is in the \(name) queue but marked otherwise")
                blockBytes += block.footprint
                if !inMain { smallSeen += block.footprint }
                if block.isAbsence {
                    absentSeen += 1
                    absenceCharges += block.footprint + Self.absenceOverhead
                }
                let found = find(block.key, hash: hasher.hash(block.key))
                check(found?.entry == entry, "entry \(entry) cannot be found by its key")
                previous = entry
                entry = records[entry].next
            }
            check(list.tail == previous, "the \(name) queue's tail is not its last entry")
        }
        check(smallSeen == smallBytes, "small queue counted \(smallBytes) bytes, holds \(smallSeen)")
        check(seen.count == items, "\(seen.count) entries listed, \(items) counted")
        check(table.occupiedBuckets == items, "\(table.occupiedBuckets) buckets used for \(items) entries")
        check(absentSeen == absentItems, "\(absentSeen) absences listed, \(absentItems) counted")
        check(absenceCharges == absenceBytes, "absences charged \(absenceBytes), sum to \(absenceCharges)")
        check(absenceBytes <= absenceBudget, "absences take \(absenceBytes) of \(absenceBudget)")
        let structureBytes = table.footprint + records.footprint + ghost.footprint
        check(blockBytes + structureBytes == bytes, "bytes counted \(bytes), held \(blockBytes + structureBytes)")
        check(bytes <= budget, "bytes \(bytes) over budget \(budget)")

        var absenceCount = 0
        var previous = UInt32.noEntry
        var entry = absences.head
        while entry != .noEntry, absenceCount <= absentItems {
            check(seen.contains(entry) && EntryBlock(records[entry].block!).isAbsence,
                  "absence list holds entry \(entry), which is no absence")
            guard seen.contains(entry) else { break }
            let links = absenceLinks
            check(links.previous(of: entry) == previous, "absence \(entry) has a wrong previous link")
            absenceCount += 1
            previous = entry
            entry = links.next(of: entry)
        }
        check(absenceCount == absentItems, "\(absenceCount) absences linked, \(absentItems) counted")
        check(absences.tail == previous, "absence tail is not the last absence")
        return violations
    }
}
