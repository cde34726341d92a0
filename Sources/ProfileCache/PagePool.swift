import Glibc

/// Where one cache's memory comes from: its slabs' pages and its shards' hash tables and
/// record arrays. Pages are 64 KiB, cut from 2 MiB regions, each mapped on its own at a 2 MiB
/// boundary and advised for transparent huge pages (`MADV_HUGEPAGE`; many systems enable them
/// only where asked).
///
/// Why: a lookup of a random id touches a bucket, a record and a block, each at a random place
/// in memory. With 4 KiB pages nearly every one of those touches also missed the TLB, and on a
/// virtual machine a miss walks two page tables; one huge page maps 512 times as much. Where the
/// kernel has no huge page to give, a region is backed by ordinary pages and works the same.
///
/// A region goes back to the system as soon as none of its pages is in use (FLUSHALL), so an
/// emptied cache holds no pages. Arrays smaller than a page come from malloc, and arrays larger
/// than a region get a mapping of their own, rounded up to whole regions.
///
/// Thread-safe: the shards of one cache take and give memory under the pool's own lock (a
/// pthread mutex, which ThreadSanitizer understands). Memory is taken only when a slab runs out
/// of room or an array grows, so the lock is rarely contended.
final class PagePool: @unchecked Sendable {
    static let pageSize = 64 << 10
    static let regionSize = 2 << 20
    static let pagesPerRegion = regionSize / pageSize

    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    /// The pages in use in each region, bit `i` for page `i`, by region base address.
    private var regions: [UInt: UInt32] = [:]
    /// The region mapped last (it may be unmapped since).
    private var newestRegion: UInt = 0
    /// Mappings of more than a region, by base address: their sizes.
    private var largeMappings: [UInt: Int] = [:]

    init() {
        lock = .allocate(capacity: 1)
        pthread_mutex_init(lock, nil)
    }

    deinit {
        for base in regions.keys { munmap(UnsafeMutableRawPointer(bitPattern: base), Self.regionSize) }
        for (base, size) in largeMappings { munmap(UnsafeMutableRawPointer(bitPattern: base), size) }
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    /// Regions and large mappings mapped now.
    var mappingCount: Int {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return regions.count + largeMappings.count
    }

    /// A page of `pageSize` bytes, aligned to `pageSize`.
    func takePage() -> UnsafeMutableRawPointer {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return takeRun(of: 1)
    }

    /// Takes back pages `takePage()` handed out.
    func givePages(_ pages: [UnsafeMutableRawPointer]) {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        for page in pages { giveRun(page, of: 1) }
    }

    /// What an array of `byteCount` bytes from `allocate` really occupies.
    static func footprint(byteCount: Int) -> Int {
        if byteCount < pageSize { return MallocFootprint.estimate(byteCount: byteCount) }
        if byteCount <= regionSize { return (byteCount + pageSize - 1) / pageSize * pageSize }
        return (byteCount + regionSize - 1) / regionSize * regionSize
    }

    /// Room for an array of `byteCount` bytes (more than zero), aligned at least as malloc aligns.
    func allocate(byteCount: Int) -> UnsafeMutableRawPointer {
        if byteCount < Self.pageSize {
            guard let block = malloc(byteCount) else { fatalError("out of memory allocating a cache array") }
            return block
        }
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        if byteCount <= Self.regionSize { return takeRun(of: Self.footprint(byteCount: byteCount) / Self.pageSize) }
        let size = Self.footprint(byteCount: byteCount)
        let base = Self.mapAligned(size)
        largeMappings[UInt(bitPattern: base)] = size
        return base
    }

    /// Takes back an array `allocate(byteCount:)` gave out for the same `byteCount`.
    func deallocate(_ array: UnsafeMutableRawPointer, byteCount: Int) {
        if byteCount < Self.pageSize { return free(array) }
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        if byteCount <= Self.regionSize {
            return giveRun(array, of: Self.footprint(byteCount: byteCount) / Self.pageSize)
        }
        guard let size = largeMappings.removeValue(forKey: UInt(bitPattern: array)) else {
            fatalError("an array was given back to a pool that did not hand it out")
        }
        munmap(array, size)
    }

    /// The first `count` free pages in a row of any region, else the start of a new region.
    /// Called with the lock held.
    private func takeRun(of count: Int) -> UnsafeMutableRawPointer {
        let run = Self.runMask(count)
        // A growing cache fills the newest region page by page; the others are looked at
        // only when it is full, not on every page.
        if let used = regions[newestRegion], let first = Self.firstFreeRun(of: count, in: used) {
            regions[newestRegion] = used | run << first
            return UnsafeMutableRawPointer(bitPattern: newestRegion + UInt(first * Self.pageSize))!
        }
        for (base, used) in regions {
            if let first = Self.firstFreeRun(of: count, in: used) {
                regions[base] = used | run << first
                return UnsafeMutableRawPointer(bitPattern: base + UInt(first * Self.pageSize))!
            }
        }
        let base = Self.mapAligned(Self.regionSize)
        newestRegion = UInt(bitPattern: base)
        regions[newestRegion] = run
        return base
    }

    /// The first page of `count` free pages in a row in a region whose pages in use are `used`.
    private static func firstFreeRun(of count: Int, in used: UInt32) -> Int? {
        // Bit i of `starts` is set where pages i ..< i + count are all free (each shift brings
        // in a zero at the top, so no run reaches past the last page).
        var starts = ~used
        for _ in 1..<count { starts &= starts >> 1 }
        return starts == 0 ? nil : starts.trailingZeroBitCount
    }

    /// Frees `count` pages from `start`; unmaps their region if nothing else in it is in use.
    /// Called with the lock held.
    private func giveRun(_ start: UnsafeMutableRawPointer, of count: Int) {
        let address = UInt(bitPattern: start)
        let base = address & ~UInt(Self.regionSize - 1)
        let first = Int(address - base) / Self.pageSize
        let run = Self.runMask(count) << first
        guard let used = regions[base], used & run == run else {
            fatalError("pages were given back to a pool that did not hand them out")
        }
        if used == run {
            regions[base] = nil
            munmap(UnsafeMutableRawPointer(bitPattern: base), Self.regionSize)
        } else {
            regions[base] = used & ~run
        }
    }

    /// `count` pages from page 0, as bits of a region's mask.
    private static func runMask(_ count: Int) -> UInt32 {
        count == pagesPerRegion ? .max : (1 << UInt32(count)) - 1
    }

    /// Maps `size` bytes (a multiple of a region) at a region boundary: mmap promises only the
    /// page size's alignment, and a huge page must start at a 2 MiB boundary. Maps a region
    /// more than asked and trims both ends.
    private static func mapAligned(_ size: Int) -> UnsafeMutableRawPointer {
        let mapped = mmap(nil, size + regionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let mapped, mapped != MAP_FAILED else { fatalError("out of memory mapping \(size) bytes for the cache") }
        let start = UInt(bitPattern: mapped)
        let aligned = (start + UInt(regionSize - 1)) & ~UInt(regionSize - 1)
        let head = Int(aligned - start)
        if head > 0 { munmap(mapped, head) }
        let tail = regionSize - head
        if tail > 0 { munmap(UnsafeMutableRawPointer(bitPattern: aligned + UInt(size))!, tail) }
        let base = UnsafeMutableRawPointer(bitPattern: aligned)!
        // Advice only: without transparent huge pages in the kernel it fails and changes nothing.
        _ = madvise(base, size, MADV_HUGEPAGE)
        return base
    }
}
