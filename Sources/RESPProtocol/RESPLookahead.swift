// Looking ahead over pipelined requests for the keys they read, so that the server can fetch
// their cache entries from memory together (the line protocol's look-ahead does the same for
// GET and MGET). A hint only: requests are decoded and served as if it never ran.

extension RESPDecoder {
    /// Hands `body` argument 1 of each whole multibulk request at the start of `base` whose
    /// command reads one key (`RESPCommandName.readsKey`), for the first `limit` requests at most.
    ///
    /// Reads loosely and stops at the first byte it does not expect: an inline request, a
    /// request cut off, or one with more than 1,024 arguments. Any thread, on its own bytes.
    public static func keysAhead(_ base: UnsafeRawPointer, count: Int, limit: Int,
                                 _ body: (UnsafeRawBufferPointer) -> Void) {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        /// The number on the line at `at` after `marker`, and where the next line starts.
        @inline(__always) func number(after marker: UInt8, at start: Int) -> (value: Int, next: Int)? {
            guard start < count, byte(start) == marker else { return nil }
            var i = start + 1
            var value = 0
            while i < count && i - start <= 10 {
                let digit = byte(i) &- ASCII.zero
                if digit > 9 { break }
                value = value * 10 + Int(digit)
                i += 1
            }
            guard i > start + 1, i + 1 < count, byte(i) == ASCII.cr, byte(i + 1) == ASCII.lf else { return nil }
            return (value, i + 2)
        }
        var offset = 0
        var requests = 0
        while requests < limit {
            guard let (arguments, first) = number(after: ASCII.star, at: offset), arguments >= 1, arguments <= 1024 else { return }
            var position = first
            var readsKey = false
            var key: UnsafeRawBufferPointer? = nil
            for index in 0..<arguments {
                guard let (length, bodyStart) = number(after: ASCII.dollar, at: position),
                      length <= count - bodyStart - 2 else { return }
                let argument = UnsafeRawBufferPointer(start: base + bodyStart, count: length)
                if index == 0 {
                    readsKey = RESPCommandName.lookup(argument)?.readsKey == true
                } else if index == 1 && readsKey {
                    key = argument
                }
                position = bodyStart + length + 2
            }
            if let key { body(key) }
            offset = position
            requests += 1
        }
    }
}
