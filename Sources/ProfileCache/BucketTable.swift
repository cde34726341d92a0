import CPrefetch
import Glibc

/// One slot of the hash table: the low 32 bits of the key's hash and the entry's index.
struct Bucket {
    var hash: UInt32
    var entry: UInt32

    static let empty = Bucket(hash: 0, entry: .noEntry)
    var isEmpty: Bool { entry == .noEntry }
}

/// An open-addressing hash table from a key's hash to an entry index: linear
/// probing over a power-of-two array, at most three quarters full, with
/// backward-shift deletion so no tombstones pile up.
///
/// It stores no keys; callers confirm a candidate by comparing the entry's key.
/// Owned by one shard; used only under its lock.
struct BucketTable: ~Copyable {
    private var buckets: UnsafeMutablePointer<Bucket>?
    private var mask = 0
    private(set) var capacity = 0
    /// The table's own footprint in the allocator (zero before the first entry).
    private(set) var footprint = 0
    private let pool: PagePool

    init(pool: PagePool) {
        self.pool = pool
    }

    deinit {
        if let buckets { pool.deallocate(buckets, byteCount: capacity * MemoryLayout<Bucket>.stride) }
    }

    /// Whether holding `count` entries would push the table past three quarters full.
    func needsGrowth(toHold count: Int) -> Bool {
        count * 4 > capacity * 3
    }

    var grownCapacity: Int { max(8, capacity * 2) }

    var footprintAfterGrowth: Int {
        PagePool.footprint(byteCount: grownCapacity * MemoryLayout<Bucket>.stride)
    }

    /// The first bucket with `hash` whose entry satisfies `matches`: where it is and which entry it names.
    func find(_ hash: UInt32, where matches: (UInt32) -> Bool) -> (position: Int, entry: UInt32)? {
        guard let buckets else { return nil }
        var position = Int(hash) & mask
        while true {
            let bucket = buckets[position]
            if bucket.isEmpty { return nil }
            if bucket.hash == hash && matches(bucket.entry) { return (position, bucket.entry) }
            position = (position + 1) & mask
        }
    }

    /// Where the buckets are and the mask of their count, as `BucketHome` publishes them:
    /// (0, 0) before the first entry.
    var home: (base: Int, mask: Int) { (Int(bitPattern: buckets), mask) }

    /// The entry of the first bucket with `hash`, or `.noEntry`: the likely match, unconfirmed.
    @inline(__always)
    func firstCandidate(_ hash: UInt32) -> UInt32 {
        guard let buckets else { return .noEntry }
        var position = Int(hash) & mask
        while true {
            let bucket = buckets[position]
            if bucket.isEmpty || bucket.hash == hash { return bucket.entry }
            position = (position + 1) & mask
        }
    }

    /// Adds a bucket; the caller has made sure the table does not need to grow.
    mutating func insert(hash: UInt32, entry: UInt32) {
        var position = Int(hash) & mask
        while !buckets![position].isEmpty {
            position = (position + 1) & mask
        }
        buckets![position] = Bucket(hash: hash, entry: entry)
    }

    /// Empties the bucket at `position`, shifting later buckets of the same probe run back into the hole.
    mutating func remove(at position: Int) {
        let buckets = buckets!
        var hole = position
        var probe = position
        while true {
            probe = (probe + 1) & mask
            let bucket = buckets[probe]
            if bucket.isEmpty { break }
            let home = Int(bucket.hash) & mask
            // It may move back only if the hole lies between its home and where it sits.
            if (probe - home) & mask >= (probe - hole) & mask {
                buckets[hole] = bucket
                hole = probe
            }
        }
        buckets[hole] = .empty
    }

    /// How many buckets hold an entry; walks the whole table, for consistency checks.
    var occupiedBuckets: Int {
        guard let buckets else { return 0 }
        return (0..<capacity).count { !buckets[$0].isEmpty }
    }

    /// Doubles the table and re-inserts every bucket.
    mutating func grow() {
        let oldBuckets = buckets
        let oldCapacity = capacity
        capacity = grownCapacity
        mask = capacity - 1
        let byteCount = capacity * MemoryLayout<Bucket>.stride
        let newBuckets = pool.allocate(byteCount: byteCount).bindMemory(to: Bucket.self, capacity: capacity)
        newBuckets.initialize(repeating: .empty, count: capacity)
        buckets = newBuckets
        footprint = PagePool.footprint(byteCount: byteCount)
        if let oldBuckets {
            for index in 0..<oldCapacity where !oldBuckets[index].isEmpty {
                insert(hash: oldBuckets[index].hash, entry: oldBuckets[index].entry)
            }
            pool.deallocate(oldBuckets, byteCount: oldCapacity * MemoryLayout<Bucket>.stride)
        }
    }
}
