import Foundation
import Testing
@testable import ProfileCache

/// The cache's memory: pages and arrays cut from 2 MiB regions advised for huge pages.
@Suite struct PagePoolTests {
    static let regionMask = UInt(PagePool.regionSize - 1)

    @Test func pagesFillOneAlignedRegionBeforeTheNextAndGoBackWithIt() {
        let pool = PagePool()
        var pages: [UnsafeMutableRawPointer] = []
        for _ in 0..<PagePool.pagesPerRegion { pages.append(pool.takePage()) }
        let region = UInt(bitPattern: pages[0]) & ~Self.regionMask
        #expect(region == UInt(bitPattern: pages[0]), "the first page starts its region, at a 2 MiB boundary")
        #expect(Set(pages).count == pages.count)
        for page in pages {
            #expect(UInt(bitPattern: page) & ~Self.regionMask == region)
            #expect(UInt(bitPattern: page) % UInt(PagePool.pageSize) == 0)
            page.storeBytes(of: 1, as: UInt64.self)
        }
        #expect(pool.mappingCount == 1)
        pages.append(pool.takePage())
        #expect(pool.mappingCount == 2)
        pool.givePages(Array(pages.prefix(PagePool.pagesPerRegion)))
        #expect(pool.mappingCount == 1, "the full region went back to the system")
        pool.givePages([pages.last!])
        #expect(pool.mappingCount == 0)
    }

    @Test func aFreedPageIsTakenAgainBeforeANewRegion() {
        let pool = PagePool()
        let pages = (0..<3).map { _ in pool.takePage() }
        pool.givePages([pages[1]])
        #expect(pool.takePage() == pages[1])
        #expect(pool.mappingCount == 1)
        pool.givePages(pages)
        #expect(pool.mappingCount == 0)
    }

    @Test func anArrayTakesWholePagesInARowOrAMappingOfItsOwn() {
        let pool = PagePool()
        let small = pool.allocate(byteCount: 1000)
        #expect(pool.mappingCount == 0, "an array under a page comes from malloc")
        #expect(PagePool.footprint(byteCount: 1000) == MallocFootprint.estimate(byteCount: 1000))

        // A page in use at 1 leaves room for a run of 4 only from page 2 on.
        let first = pool.takePage()
        let second = pool.takePage()
        pool.givePages([first])
        let runBytes = 3 * PagePool.pageSize + 1
        #expect(PagePool.footprint(byteCount: runBytes) == 4 * PagePool.pageSize)
        let run = pool.allocate(byteCount: runBytes)
        #expect(run == second + PagePool.pageSize)
        run.initializeMemory(as: UInt8.self, repeating: 7, count: runBytes)
        #expect(pool.takePage() == first, "the page before the run is still free")

        let largeBytes = PagePool.regionSize + 1
        #expect(PagePool.footprint(byteCount: largeBytes) == 2 * PagePool.regionSize)
        let large = pool.allocate(byteCount: largeBytes)
        #expect(UInt(bitPattern: large) & Self.regionMask == 0)
        large.storeBytes(of: 9, toByteOffset: largeBytes - 8, as: UInt64.self)
        #expect(pool.mappingCount == 2)

        pool.deallocate(large, byteCount: largeBytes)
        pool.deallocate(run, byteCount: runBytes)
        pool.deallocate(small, byteCount: 1000)
        #expect(pool.mappingCount == 1)
        pool.givePages([first, second])
        #expect(pool.mappingCount == 0)
    }

    @Test func aRegionIsAdvisedForHugePagesWhereTheKernelHasThem() throws {
        // Kernels built without transparent huge pages refuse the advice; nothing to see there.
        try #require(FileManager.default.fileExists(atPath: "/sys/kernel/mm/transparent_hugepage"))
        let pool = PagePool()
        let page = pool.takePage()
        defer { pool.givePages([page]) }
        let address = UInt(bitPattern: page)
        // Read in a loop: a /proc file reports no size, and it is produced as it is read.
        let file = try #require(fopen("/proc/self/smaps", "r"))
        defer { fclose(file) }
        var smaps = ""
        var buffer = [CChar](repeating: 0, count: 4096)
        while fgets(&buffer, Int32(buffer.count), file) != nil { smaps += String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        var inMapping = false
        var flags: [Substring] = []
        for line in smaps.split(separator: "\n") {
            if let range = line.split(separator: " ").first, range.contains("-"), !range.hasSuffix(":") {
                let bounds = range.split(separator: "-").compactMap { UInt($0, radix: 16) }
                inMapping = bounds.count == 2 && bounds[0] <= address && address < bounds[1]
            } else if inMapping && line.hasPrefix("VmFlags:") {
                flags = line.split(separator: " ").dropFirst().map { $0 }
            }
        }
        #expect(flags.contains("hg"), "VmFlags of the region: \(flags)")
    }

    @Test func flushingTheCacheGivesEveryRegionBack() {
        let cache = ProfileCache(limitBytes: 64 << 20, shardCount: 4)
        for i in 0..<20_000 { cache.store("user\(i)", replyLine("user\(i)")) }
        #expect(cache.pages.mappingCount > 0)
        cache.removeAll()
        #expect(cache.pages.mappingCount == 0)
        #expect(cache.integrityViolations() == [])
    }
}
