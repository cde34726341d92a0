import Glibc
import ProfileCache
import ProfileProtocol
import RESPProtocol

// Looking ahead over a read's pipelined lookups, on either front, so the cache's memory misses
// for all of them overlap (see `ProfileCache.prefetch`). A hint only: requests are served as if
// it never ran.

extension Worker {
    /// How many ids one look-ahead gathers, and how many lines it reads at most: two pipelines
    /// of 16 GETs, or two MGETs of 16.
    static let lookaheadSlots = 32

    /// Prefetches the cache entries of the ids of the plain GETs (`plainGetUserId`) and the
    /// MGETs among the first complete lines of `bytes`, when there are two ids or more.
    ///
    /// An MGET's ids are read loosely, split at single spaces: one the decoder will read
    /// otherwise (quoted, or after a run of blanks) costs only useless loads.
    func prefetchLookups(_ bytes: UnsafeRawPointer, _ count: Int) {
        var gathered = 0
        var offset = 0
        // Lines are bounded too, so a read of other requests is not scanned to its end on
        // each of the passes its serving takes.
        var lines = 0
        while gathered < Self.lookaheadSlots && lines < Self.lookaheadSlots && offset < count,
              let newline = memchr(bytes + offset, 0x0A, count - offset) {
            let lineEnd = bytes.distance(to: UnsafeRawPointer(newline))
            var contentEnd = lineEnd
            if contentEnd > offset && bytes.load(fromByteOffset: contentEnd - 1, as: UInt8.self) == 0x0D { contentEnd -= 1 }
            let line = UnsafeRawBufferPointer(start: bytes + offset, count: contentEnd - offset)
            if let userId = RequestDecoder.plainGetUserId(line) {
                lookahead[gathered] = PrefetchSlot(key: userId)
                gathered += 1
            } else if Self.isMultiGet(line) {
                var start = offset + 5
                while start < contentEnd && gathered < Self.lookaheadSlots {
                    let space = memchr(bytes + start, 0x20, contentEnd - start)
                    let end = space.map { bytes.distance(to: UnsafeRawPointer($0)) } ?? contentEnd
                    if end > start {
                        lookahead[gathered] = PrefetchSlot(key: UnsafeRawBufferPointer(start: bytes + start, count: end - start))
                        gathered += 1
                    }
                    start = end + 1
                }
            }
            offset = lineEnd + 1
            lines += 1
        }
        if gathered >= 2 {
            context.cache.prefetch(UnsafeMutableBufferPointer(rebasing: lookahead[0..<gathered]))
        }
    }

    /// Prefetches the cache entries of the keys the first whole RESP requests of `bytes` read
    /// (HGETALL, HGET and the other key reads), when there are two or more.
    func prefetchRESPKeys(_ bytes: UnsafeRawPointer, _ count: Int) {
        var gathered = 0
        let slots = lookahead
        let keyspace = respKeyspace
        RESPDecoder.keysAhead(bytes, count: count, limit: Self.lookaheadSlots) { key in
            if let userId = keyspace.possibleUserId(ofKey: key) {
                slots[gathered] = PrefetchSlot(key: userId)
                gathered += 1
            }
        }
        if gathered >= 2 {
            cache.prefetch(UnsafeMutableBufferPointer(rebasing: slots[0..<gathered]))
        }
    }

    /// Whether `line` starts with `MGET ` (the verb in any case).
    @inline(__always)
    private static func isMultiGet(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count > 5
            && UInt32(littleEndian: line.loadUnaligned(as: UInt32.self)) | 0x2020_2020 == 0x7465_676d
            && line[4] == 0x20
    }
}
