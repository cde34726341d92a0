import Glibc

/// Where a shard's entry blocks live: 64 KiB pages carved into chunks rounded up to 8 bytes,
/// with a free list per chunk size, the way memcached keeps its items in slabs.
///
/// Why not malloc: it puts an 8-byte size word in front of every block and rounds to 16
/// bytes, about 15 bytes of a typical 130-byte block; here the rounding costs about 4, and
/// the pages come from one place instead of whichever thread arena the writing thread had.
/// Blocks larger than `largestChunk` (rare: a long name and portrait URI) still come from
/// malloc. The pages come from the cache's `PagePool`, in huge-page regions. Freed chunks are
/// kept for blocks of the same size, and pages go back to the pool only with the shard's state
/// (FLUSHALL), as memcached's do.
///
/// Owned by one shard; used only under its lock.
@usableFromInline
struct BlockSlab: ~Copyable {
    static let granule = 8
    static let largestChunk = 1024
    static let pageSize = PagePool.pageSize
    static let chunkSizes = largestChunk / granule

    /// `freeHeads[size / granule - 1]` chains free chunks of that size through their first bytes.
    private let freeHeads: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let pool: PagePool
    private var pages: [UnsafeMutableRawPointer] = []
    /// The unused rest of the newest page.
    private var bump: UnsafeMutableRawPointer?
    private var bumpRemaining = 0

    init(pool: PagePool) {
        self.pool = pool
        freeHeads = .allocate(capacity: Self.chunkSizes)
        freeHeads.initialize(repeating: nil, count: Self.chunkSizes)
    }

    deinit {
        pool.givePages(pages)
        freeHeads.deallocate()
    }

    /// Bytes of pages taken from the system: what the chunks really occupy, free ones included.
    var pageBytes: Int { pages.count * Self.pageSize }

    /// The chunk a block of `byteCount` bytes takes; 0 when it comes from malloc instead.
    static func chunkSize(for byteCount: Int) -> Int {
        let size = (max(byteCount, MemoryLayout<UnsafeMutableRawPointer>.size) + granule - 1) / granule * granule
        return size <= largestChunk ? size : 0
    }

    /// Room for a block of `byteCount` bytes.
    mutating func allocate(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let size = Self.chunkSize(for: byteCount)
        guard size > 0 else {
            guard let block = malloc(byteCount) else { fatalError("out of memory allocating a cache entry") }
            return block
        }
        let slot = size / Self.granule - 1
        if let chunk = freeHeads[slot] {
            freeHeads[slot] = chunk.load(as: UnsafeMutableRawPointer?.self)
            return chunk
        }
        if bumpRemaining < size {
            // The old page's tail, smaller than this chunk, stays unused.
            let page = pool.takePage()
            pages.append(page)
            bump = page
            bumpRemaining = Self.pageSize
        }
        let chunk = bump!
        bump = chunk + size
        bumpRemaining -= size
        return chunk
    }

    /// Takes back a block `allocate(byteCount)` gave out; its bytes must not be read afterwards.
    mutating func release(_ block: UnsafeMutableRawPointer, byteCount: Int) {
        let size = Self.chunkSize(for: byteCount)
        guard size > 0 else { return free(block) }
        let slot = size / Self.granule - 1
        block.storeBytes(of: freeHeads[slot], as: UnsafeMutableRawPointer?.self)
        freeHeads[slot] = block
    }
}
