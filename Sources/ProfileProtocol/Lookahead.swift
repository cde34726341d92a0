import Glibc

// Looking ahead over pipelined lines for the ids they look up, so that a server can fetch
// their cache entries from memory together. A hint only: lines are decoded and served as if
// it never ran.

extension RequestDecoder {
    /// Hands `body` the id of each plain GET (`plainGetUserId`) and the ids of each MGET among
    /// the first complete lines of `bytes`: `limit` ids at most, from `limit` lines at most, so
    /// that a read of other requests is not scanned to its end on each of its passes.
    ///
    /// An MGET's ids are read loosely, split at single spaces: one the decoder reads otherwise
    /// (quoted, or after a run of blanks) costs only a useless prefetch. Any thread, on its own bytes.
    @inlinable
    public static func idsAhead(_ bytes: UnsafeRawPointer, count: Int, limit: Int,
                                _ body: (UnsafeRawBufferPointer) -> Void) {
        var gathered = 0
        var offset = 0
        var lines = 0
        while gathered < limit && lines < limit && offset < count,
              let newline = memchr(bytes + offset, 0x0A, count - offset) {
            let lineEnd = bytes.distance(to: UnsafeRawPointer(newline))
            var contentEnd = lineEnd
            if contentEnd > offset && bytes.load(fromByteOffset: contentEnd - 1, as: UInt8.self) == 0x0D { contentEnd -= 1 }
            let line = UnsafeRawBufferPointer(start: bytes + offset, count: contentEnd - offset)
            if let userId = plainGetUserId(line) {
                body(userId)
                gathered += 1
            } else if isMultiGet(line) {
                var start = offset + 5
                while start < contentEnd && gathered < limit {
                    let space = memchr(bytes + start, 0x20, contentEnd - start)
                    let end = space.map { bytes.distance(to: UnsafeRawPointer($0)) } ?? contentEnd
                    if end > start {
                        body(UnsafeRawBufferPointer(start: bytes + start, count: end - start))
                        gathered += 1
                    }
                    start = end + 1
                }
            }
            offset = lineEnd + 1
            lines += 1
        }
    }

    /// Whether `line` starts with `MGET ` (the verb in any case).
    @inlinable @inline(__always)
    static func isMultiGet(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count > 5
            && UInt32(littleEndian: line.loadUnaligned(as: UInt32.self)) | 0x2020_2020 == 0x7465_676d
            && line[4] == 0x20
    }
}
