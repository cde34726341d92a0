import Testing
@testable import ProfileCache

/// The shard's slab: chunks rounded to 8 bytes, reused by size, large blocks from malloc.
@Suite struct BlockSlabTests {
    @Test func chunksRoundUpToEightBytesAndLargeBlocksGoToMalloc() {
        #expect(BlockSlab.chunkSize(for: 1) == 8)
        #expect(BlockSlab.chunkSize(for: 122) == 128)
        #expect(BlockSlab.chunkSize(for: 128) == 128)
        #expect(BlockSlab.chunkSize(for: 1024) == 1024)
        #expect(BlockSlab.chunkSize(for: 1025) == 0)
    }

    @Test func aReleasedChunkIsReusedForTheSameSizeOnly() {
        var slab = BlockSlab(pool: PagePool())
        let first = slab.allocate(130)
        let other = slab.allocate(60)
        #expect(other != first)
        slab.release(first, byteCount: 130)
        #expect(slab.allocate(60) != first)
        #expect(slab.allocate(132) == first)
        #expect(slab.pageBytes == BlockSlab.pageSize)
        let large = slab.allocate(5000)
        large.storeBytes(of: UInt64(7), as: UInt64.self)
        slab.release(large, byteCount: 5000)
    }

    @Test func chunksOfOnePageDoNotOverlapAndANewPageFollows() {
        var slab = BlockSlab(pool: PagePool())
        let count = BlockSlab.pageSize / 128
        var chunks: [UnsafeMutableRawPointer] = []
        for _ in 0..<count { chunks.append(slab.allocate(128)) }
        let sorted = chunks.sorted()
        for (a, b) in zip(sorted, sorted.dropFirst()) { #expect(b - a >= 128) }
        #expect(slab.pageBytes == BlockSlab.pageSize)
        _ = slab.allocate(128)
        #expect(slab.pageBytes == 2 * BlockSlab.pageSize)
    }

    @Test func theCacheChargesEachEntryItsChunk() {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        cache.store("42", replyLine("42"))
        let before = cache.statistics.bytes
        cache.store("43", replyLine("43"))
        let block = EntryBlock.headerSize + replyLine("43").utf8.count
        // One more record and bucket may come with it; the block itself costs its chunk.
        #expect(cache.statistics.bytes - before >= BlockSlab.chunkSize(for: block))
        #expect(cache.integrityViolations() == [])
    }
}
