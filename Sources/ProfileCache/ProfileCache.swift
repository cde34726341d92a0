import CPrefetch
import Glibc
import ProfileSystem
import Synchronization

/// A byte-bounded cache from userId to a profile, or to a remembered absence, in front of the
/// profile store, evicting as S3-FIFO does (`ShardState`). A profile is kept as its values inside the reply one codec encoded once for
/// it (`EncodedProfile`): what a hit of that codec copies, and what any other codec encodes its
/// own reply from (docs/BENCHMARKS.md, "What a cache entry keeps", measures why).
///
/// Thread-safe: any thread may call any method. The cache is split into shards by
/// the id's hash; each shard has its own lock, table, eviction queues and an equal
/// share of the byte budget, so threads rarely wait for one another.
///
/// Staleness: `update` and `removeAll` are authoritative and bump the shard's epoch;
/// `fill` only inserts if the epoch is still the one its ticket was issued at, so a
/// slow reader cannot put back a row older than an acknowledged write.
public final class ProfileCache: @unchecked Sendable {
    public let limitBytes: Int

    @usableFromInline
    let hasher: KeyHasher
    /// `shardCount` shards of `shardStride` bytes each: a lock, then the shard's state.
    @usableFromInline
    let shards: UnsafeMutableRawPointer
    @usableFromInline
    let shardCount: Int
    /// The hash's top bits pick the shard; the table uses the low bits.
    @usableFromInline
    let shardShift: UInt64
    /// Where every shard's slab gets its pages; freed after the shards.
    let pages = PagePool()

    /// The state follows the lock in the same shard.
    @inlinable
    static var stateOffset: Int {
        let alignment = MemoryLayout<ShardState>.alignment
        return (MemoryLayout<pthread_mutex_t>.size + alignment - 1) / alignment * alignment
    }

    /// Shards are padded to whole cache-line pairs so two threads working on
    /// neighbouring shards never share a line.
    @inlinable
    static var homeOffset: Int {
        let alignment = MemoryLayout<BucketHome>.alignment
        return (stateOffset + MemoryLayout<ShardState>.size + alignment - 1) / alignment * alignment
    }

    @inlinable
    static var shardStride: Int {
        (homeOffset + MemoryLayout<BucketHome>.size + 127) / 128 * 128
    }

    /// - Parameters:
    ///   - limitBytes: the total byte budget, counting what entries really cost:
    ///     each one's malloc'd block, plus the tables and record arrays that index them.
    ///   - shardCount: a power of two; each shard gets `limitBytes / shardCount`.
    public init(limitBytes: Int, shardCount: Int = 64) {
        guard shardCount > 0, shardCount & (shardCount - 1) == 0, shardCount <= 1 << 16 else {
            fatalError("shardCount must be a power of two from 1 to 65536, not \(shardCount)")
        }
        self.limitBytes = max(0, limitBytes)
        self.hasher = KeyHasher(seed: UInt64.random(in: .min ... .max))
        self.shardCount = shardCount
        self.shardShift = UInt64(64 - shardCount.trailingZeroBitCount)
        self.shards = UnsafeMutableRawPointer.allocate(byteCount: shardCount * Self.shardStride, alignment: 128)
        for index in 0..<shardCount {
            let shard = shard(at: index)
            pthread_mutex_init(shard.lock, nil)
            shard.state.initialize(to: ShardState(index: UInt32(index), hasher: hasher,
                                                  budget: self.limitBytes / shardCount, pool: pages))
            shard.home.initialize(to: BucketHome())
        }
    }

    deinit {
        for index in 0..<shardCount {
            let shard = shard(at: index)
            shard.state.deinitialize(count: 1)
            shard.home.deinitialize(count: 1)
            pthread_mutex_destroy(shard.lock)
        }
        shards.deallocate()
    }

    /// Looks up `userId` and runs `body` with the outcome while the shard is locked.
    ///
    /// A hit or a remembered absence counts a use, which spares it eviction that reaches it
    /// (`ShardState`). Keep
    /// `body` brief, e.g. copy the reply bytes out: other threads using the same
    /// shard wait for it. Ids that are empty or longer than 255 bytes always miss.
    @inlinable
    public func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (CacheLookup) -> R) -> R {
        let hash = hasher.hash(userId)
        let shard = shard(at: shardIndex(for: hash))
        // Handed out through a local rather than as withLock's result, which must be
        // `sending`: a value computed from the locked state cannot promise that.
        var result: R?
        shard.withLock {
            result = body(shard.state.pointee.lookup(userId, hash: hash))
        }
        return result!
    }

    /// Looks up `userId` and, on a hit, copies its reply line into `room` if it fits.
    ///
    /// The same lookup as `lookup(_:_:)`, for a caller that wants only the reply's bytes:
    /// the shard is locked for the probe and the copy, and no closure is involved. A hit
    /// whose reply is longer than `room` copies nothing; an empty `room` asks only whether
    /// the id is cached.
    public func lookup(_ userId: UnsafeRawBufferPointer, copyingReplyInto room: UnsafeMutableRawBufferPointer) -> CacheCopy {
        let hash = hasher.hash(userId)
        let shard = shard(at: shardIndex(for: hash))
        pthread_mutex_lock(shard.lock)
        defer { pthread_mutex_unlock(shard.lock) }
        switch shard.state.pointee.lookup(userId, hash: hash) {
        case .hit(let profile):
            let reply = profile.reply
            if reply.count <= room.count, let destination = room.baseAddress, let source = reply.baseAddress {
                destination.copyMemory(from: source, byteCount: reply.count)
            }
            return .hit(replyCount: reply.count)
        case .absent:
            return .absent
        case .miss(let ticket):
            return .miss(ticket)
        }
    }

    /// Starts bringing into the CPU's cache what looking up each id in `batch` will read, so
    /// that a burst of lookups waits for memory once rather than three times per id.
    ///
    /// A lookup reads a bucket, then the entry record it names, then the entry's block, each
    /// a likely cache miss that cannot start before the one before it ends. Here each stage
    /// is run across the whole batch before the next, so a batch's misses overlap. Only a
    /// hint: it changes nothing, and whatever changes in between costs only a wasted load.
    public func prefetch(_ batch: UnsafeMutableBufferPointer<PrefetchSlot>) {
        for i in batch.indices {
            let hash = hasher.hash(batch[i].key)
            batch[i].hash = hash
            shard(at: shardIndex(for: hash)).home.pointee.prefetch(hash: hash)
        }
        for i in batch.indices {
            let shard = shard(at: shardIndex(for: batch[i].hash))
            pthread_mutex_lock(shard.lock)
            batch[i].entry = shard.state.pointee.prefetchRecord(hash: batch[i].hash)
            pthread_mutex_unlock(shard.lock)
        }
        for i in batch.indices where batch[i].entry != .noEntry {
            let shard = shard(at: shardIndex(for: batch[i].hash))
            pthread_mutex_lock(shard.lock)
            shard.state.pointee.prefetchBlock(entry: batch[i].entry)
            pthread_mutex_unlock(shard.lock)
        }
    }

    /// Offers what the store returned after a miss: the profile, nil when the id has none.
    ///
    /// Dropped when an `update` or `removeAll` touched the shard since `ticket` was
    /// issued, or when the id is cached by now.
    public func fill(_ userId: UnsafeRawBufferPointer, profile: EncodedProfile?, ticket: FillTicket) {
        let hash = hasher.hash(userId)
        let index = shardIndex(for: hash)
        guard Int(ticket.shard) == index else { return }
        let shard = shard(at: index)
        shard.withLock {
            shard.state.pointee.fill(userId, hash: hash, profile: profile, ticketEpoch: ticket.epoch)
            shard.publishHome()
        }
    }

    /// The authoritative update after a committed write: replaces whatever is cached for
    /// `userId` with `profile` (an absence when nil), and invalidates the shard's outstanding
    /// fill tickets, so that no read of the store from before the write can put an older value
    /// back.
    ///
    /// An id that is not cached stays so (a write does not push out what readers use): a later
    /// miss reads it from the store. A profile too large to cache still removes the old entry.
    public func update(_ userId: UnsafeRawBufferPointer, profile: EncodedProfile?) {
        let hash = hasher.hash(userId)
        let shard = shard(at: shardIndex(for: hash))
        // The block comes from the shard's slab, so it is made under the lock: a copy of a
        // reply line, shorter than the lookups waiting on it would notice.
        shard.withLock {
            shard.state.pointee.update(userId, hash: hash, profile: profile)
            shard.publishHome()
        }
    }

    /// Forgets whatever is cached for `userId` (a profile or a remembered absence): another
    /// server changed it. Invalidates the shard's outstanding fill tickets too, so that a read
    /// that began before the change cannot put its older value back.
    public func invalidate(_ userId: UnsafeRawBufferPointer) {
        let hash = hasher.hash(userId)
        let shard = shard(at: shardIndex(for: hash))
        shard.withLock {
            shard.state.pointee.invalidate(userId, hash: hash)
        }
    }

    /// Drops every entry (FLUSHALL) and invalidates every outstanding fill ticket.
    public func removeAll() {
        for index in 0..<shardCount {
            let shard = shard(at: index)
            var retired: ShardState?
            shard.withLock {
                retired = shard.state.pointee.removeAll()
                shard.publishHome()
            }
            // Frees the old entries now, outside the lock.
            _ = consume retired
        }
    }

    /// Totals over all shards, each read under its own lock.
    public var statistics: CacheStatistics {
        var total = CacheStatistics(limitBytes: limitBytes)
        for index in 0..<shardCount {
            let shard = shard(at: index)
            shard.withLock {
                let state = shard.state
                total.items += state.pointee.items
                total.absentItems += state.pointee.absentItems
                total.bytes += state.pointee.bytes
                total.evictions += state.pointee.evictions
                total.smallBytes += state.pointee.smallBytes
                total.promotions += state.pointee.promotions
                total.ghostHits += state.pointee.ghostHits
            }
        }
        return total
    }

    /// The keys in each shard's small and main queues, head to tail; for tests.
    func queuedKeys() -> [(small: [[UInt8]], main: [[UInt8]])] {
        (0..<shardCount).map { index in
            let shard = shard(at: index)
            var keys: (small: [[UInt8]], main: [[UInt8]]) = ([], [])
            shard.withLock { keys = shard.state.pointee.queuedKeys() }
            return keys
        }
    }

    /// Every inconsistency found by walking all shards, each under its lock; for tests.
    func integrityViolations() -> [String] {
        var violations: [String] = []
        for index in 0..<shardCount {
            let shard = shard(at: index)
            shard.withLock {
                violations += shard.state.pointee.integrityViolations()
            }
        }
        return violations
    }

    /// A shard's lock is a pthread mutex, not Synchronization's Mutex: ThreadSanitizer sees
    /// pthread handoffs, but not the futex one inside Mutex, and reported every shard access.
    @usableFromInline
    struct Shard {
        @usableFromInline let lock: UnsafeMutablePointer<pthread_mutex_t>
        @usableFromInline let state: UnsafeMutablePointer<ShardState>
        @usableFromInline let home: UnsafeMutablePointer<BucketHome>

        @inlinable
        init(_ base: UnsafeMutableRawPointer) {
            lock = base.assumingMemoryBound(to: pthread_mutex_t.self)
            state = (base + ProfileCache.stateOffset).assumingMemoryBound(to: ShardState.self)
            home = (base + ProfileCache.homeOffset).assumingMemoryBound(to: BucketHome.self)
        }

        /// Publishes where the table's buckets are now, after a change that may have moved
        /// them; under the lock.
        func publishHome() {
            let current = state.pointee.bucketHome
            home.pointee.base.store(current.base, ordering: .relaxed)
            home.pointee.mask.store(current.mask, ordering: .relaxed)
        }

        @inlinable
        func withLock(_ body: () -> Void) {
            pthread_mutex_lock(lock)
            defer { pthread_mutex_unlock(lock) }
            body()
        }
    }

    /// - Precondition: `index` is below `shardCount`, so the offset cannot overflow.
    @inlinable @inline(__always)
    func shard(at index: Int) -> Shard {
        Shard(shards + index &* Self.shardStride)
    }

    @inlinable @inline(__always)
    func shardIndex(for hash: UInt64) -> Int {
        Int(truncatingIfNeeded: hash >> shardShift)
    }
}

/// Where a shard's buckets are, published for the first stage of `prefetch`, which reads it
/// without the lock: that stage only starts a load, and a load started from an address just
/// replaced (the table grew, or was emptied, and the old one went back to the pool) is a hint
/// that misses, never a fault. Every stage that reads the table itself takes the lock.
///
/// Written under the shard's lock; read by any thread.
@usableFromInline
struct BucketHome: ~Copyable {
    @usableFromInline let base = Atomic<Int>(0)
    @usableFromInline let mask = Atomic<Int>(0)

    @usableFromInline init() {}

    /// Starts loading the bucket where a probe for `hash` begins.
    @inline(__always)
    func prefetch(hash: UInt64) {
        let base = base.load(ordering: .relaxed)
        guard base != 0, let buckets = UnsafeRawPointer(bitPattern: base) else { return }
        let position = Int(UInt32(truncatingIfNeeded: hash)) & mask.load(ordering: .relaxed)
        profiled_prefetch(buckets + position &* MemoryLayout<Bucket>.stride)
    }
}
