import Glibc

// Looking ahead over pipelined lines for the ids they look up, so that a server can fetch
// their cache entries from memory together. A hint only: lines are decoded and served as if
// it never ran.

/// Reading request lines without a decoder: the plain GET that needs no tokenizer, and the
/// look-ahead over a pipeline's lookups. Static functions of a caseless enum, so that a call
/// costs no class metadata lookup, as a class's static method does on every request.
public enum RequestLines {
    /// The userId of `line` when it is a GET in its plainest form, else nil: the verb in any
    /// case, one space, and 1 to 128 bytes from `!` to DEL, the first not a quote.
    ///
    /// For such a line `decode` and `command` give `.get` of these same bytes (one bare
    /// token, nothing to unescape, all ASCII, a valid size), so a server may skip them. It is
    /// the form nearly every pipelined lookup takes; any other line returns nil and is
    /// decoded as usual. Reads `line` only.
    public static func plainGetUserId(_ line: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        let count = line.count
        guard count > 4 && count <= 4 + Limits.userId, let base = line.baseAddress else { return nil }
        // The three letters in any case, then exactly a space: OR-ing 0x20 into the fourth
        // byte would let a NUL pass for it.
        let head = UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)) | 0x0020_2020
        guard head == 0x2074_6567, base.load(fromByteOffset: 4, as: UInt8.self) != ASCII.quote else { return nil }
        var i = 4
        while i + 8 <= count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            guard leadingASCIIBytes(atLeast: 0x21, in: word) == 8 else { return nil }
            i += 8
        }
        while i < count {
            guard base.load(fromByteOffset: i, as: UInt8.self) &- 0x21 < 0x5F else { return nil }
            i += 1
        }
        return UnsafeRawBufferPointer(start: base + 4, count: count - 4)
    }

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
