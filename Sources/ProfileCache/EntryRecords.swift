import CPrefetch
import Glibc

/// The fixed-size part of an entry: its block and its links in the recency list.
struct EntryRecord {
    /// nil while the record is on the free list.
    var block: UnsafeMutableRawPointer?
    var previous: UInt32
    var next: UInt32
}

extension UInt32 {
    /// The index that names no entry: it ends a list and marks an empty bucket.
    static let noEntry = UInt32.max
}

/// A growable array of entry records addressed by 32-bit index, with a free list.
///
/// Indices stay valid while the array grows, so links and buckets hold indices,
/// never pointers. Owned by one shard; used only under its lock.
struct EntryRecords: ~Copyable {
    private(set) var base: UnsafeMutablePointer<EntryRecord>?
    private(set) var capacity = 0
    /// Records `0..<initialized` have been handed out at least once.
    private(set) var initialized = 0
    private var freeHead = UInt32.noEntry
    /// The array's own footprint in the allocator (zero before the first entry).
    private(set) var footprint = 0
    private let pool: PagePool

    init(pool: PagePool) {
        self.pool = pool
    }

    deinit {
        if let base { pool.deallocate(base, byteCount: capacity * MemoryLayout<EntryRecord>.stride) }
    }

    subscript(index: UInt32) -> EntryRecord {
        get { base![Int(index)] }
        nonmutating set { base![Int(index)] = newValue }
    }

    /// Starts loading record `index`, if there is one.
    @inline(__always)
    func prefetch(_ index: UInt32) {
        guard let base, Int(index) < initialized else { return }
        profiled_prefetch(base + Int(index))
    }

    /// The block of record `index`, if there is such a record and it is in use.
    @inline(__always)
    func blockIfInUse(_ index: UInt32) -> UnsafeMutableRawPointer? {
        guard let base, Int(index) < initialized else { return nil }
        return base[Int(index)].block
    }

    var isFull: Bool { freeHead == .noEntry && initialized == capacity }

    /// Grows by a quarter: enough to stay amortized O(1), little enough that the
    /// unused tail stays a small part of what each entry costs.
    var grownCapacity: Int { max(8, capacity + capacity / 4) }

    var footprintAfterGrowth: Int {
        PagePool.footprint(byteCount: grownCapacity * MemoryLayout<EntryRecord>.stride)
    }

    /// Moves the records to a larger array (the pool has no realloc; growth is rare).
    mutating func grow() {
        let newCapacity = grownCapacity
        let raw = pool.allocate(byteCount: newCapacity * MemoryLayout<EntryRecord>.stride)
        let newBase = raw.bindMemory(to: EntryRecord.self, capacity: newCapacity)
        if let base {
            newBase.moveInitialize(from: base, count: initialized)
            pool.deallocate(base, byteCount: capacity * MemoryLayout<EntryRecord>.stride)
        }
        base = newBase
        capacity = newCapacity
        footprint = PagePool.footprint(byteCount: newCapacity * MemoryLayout<EntryRecord>.stride)
    }

    /// Takes a free record for `block`; the caller has made sure the array is not full.
    mutating func claim(for block: UnsafeMutableRawPointer) -> UInt32 {
        let index: UInt32
        if freeHead != .noEntry {
            index = freeHead
            freeHead = self[index].next
        } else {
            index = UInt32(initialized)
            initialized += 1
        }
        self[index] = EntryRecord(block: block, previous: .noEntry, next: .noEntry)
        return index
    }

    mutating func release(_ index: UInt32) {
        self[index] = EntryRecord(block: nil, previous: .noEntry, next: freeHead)
        freeHead = index
    }
}

/// Reads and writes one kind of list link for the entries of a shard.
protocol EntryLinks {
    func previous(of entry: UInt32) -> UInt32
    func next(of entry: UInt32) -> UInt32
    func setPrevious(of entry: UInt32, to link: UInt32)
    func setNext(of entry: UInt32, to link: UInt32)
}

/// The recency links kept in the records: every entry is on this list.
struct RecencyLinks: EntryLinks {
    let records: UnsafeMutablePointer<EntryRecord>

    func previous(of entry: UInt32) -> UInt32 { records[Int(entry)].previous }
    func next(of entry: UInt32) -> UInt32 { records[Int(entry)].next }
    func setPrevious(of entry: UInt32, to link: UInt32) { records[Int(entry)].previous = link }
    func setNext(of entry: UInt32, to link: UInt32) { records[Int(entry)].next = link }
}

/// The absence links kept in the absences' own blocks, so profiles pay nothing for them.
struct AbsenceLinks: EntryLinks {
    let records: UnsafeMutablePointer<EntryRecord>

    private func block(_ entry: UInt32) -> EntryBlock { EntryBlock(records[Int(entry)].block!) }

    func previous(of entry: UInt32) -> UInt32 { block(entry).absencePrevious }
    func next(of entry: UInt32) -> UInt32 { block(entry).absenceNext }
    func setPrevious(of entry: UInt32, to link: UInt32) { block(entry).absencePrevious = link }
    func setNext(of entry: UInt32, to link: UInt32) { block(entry).absenceNext = link }
}

/// The two ends of a doubly linked list threaded through entry indices:
/// most recently used at the head, the next to evict at the tail.
struct RecencyList {
    private(set) var head = UInt32.noEntry
    private(set) var tail = UInt32.noEntry

    @inline(__always)
    mutating func pushFront(_ entry: UInt32, _ links: some EntryLinks) {
        links.setPrevious(of: entry, to: .noEntry)
        links.setNext(of: entry, to: head)
        if head != .noEntry {
            links.setPrevious(of: head, to: entry)
        } else {
            tail = entry
        }
        head = entry
    }

    @inline(__always)
    mutating func remove(_ entry: UInt32, _ links: some EntryLinks) {
        let previous = links.previous(of: entry)
        let next = links.next(of: entry)
        if previous != .noEntry {
            links.setNext(of: previous, to: next)
        } else {
            head = next
        }
        if next != .noEntry {
            links.setPrevious(of: next, to: previous)
        } else {
            tail = previous
        }
    }

    @inline(__always)
    mutating func moveToFront(_ entry: UInt32, _ links: some EntryLinks) {
        guard head != entry else { return }
        remove(entry, links)
        pushFront(entry, links)
    }
}
