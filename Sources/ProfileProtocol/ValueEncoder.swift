import WireBytes
/// Writes a value as one protocol token: bare when it can be, quoted otherwise.
///
/// A value is bare when it is not empty and holds no byte at or below 0x20, no 0x7F,
/// no `"` and no `\`. Otherwise it is quoted, with `\"` `\\` `\n` `\r` `\t`, and `\xHH`
/// (lower-case hex) for every other byte below 0x20 and for 0x7F; bytes of 0x80 and
/// above pass as they are. The result is also a valid request token, so clients
/// build requests with it.
///
/// Stateless; any thread may use it.
public enum ValueEncoder {
    /// The most bytes one input byte can become (`\xHH`); with the two quotes, a
    /// value of n bytes encodes to at most `maxExpansion * n + 2` bytes.
    public static let maxExpansion = 4

    /// Bytes `write` produces for `value`.
    public static func encodedCount(_ value: UnsafeRawBufferPointer) -> Int {
        guard needsQuotes(value) else {
            return value.count
        }
        var count = 2
        for b in value {
            count += escapedCount(b)
        }
        return count
    }

    /// Writes the encoded `value` at `out`, which must have room for `encodedCount(value)` bytes.
    ///
    /// - Returns: The number of bytes written.
    public static func write(_ value: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
        guard needsQuotes(value) else {
            return copyBytes(value, to: out)
        }
        var n = 0
        func put(_ b: UInt8) {
            out.storeBytes(of: b, toByteOffset: n, as: UInt8.self)
            n += 1
        }
        put(ASCII.quote)
        for b in value {
            switch b {
            case ASCII.quote, ASCII.backslash: put(ASCII.backslash); put(b)
            case ASCII.lf: put(ASCII.backslash); put(UInt8(ascii: "n"))
            case ASCII.cr: put(ASCII.backslash); put(UInt8(ascii: "r"))
            case ASCII.tab: put(ASCII.backslash); put(UInt8(ascii: "t"))
            case 0..<0x20, 0x7F:
                put(ASCII.backslash)
                put(UInt8(ascii: "x"))
                put(lowerHexDigit(b >> 4))
                put(lowerHexDigit(b & 0xF))
            default: put(b)
            }
        }
        put(ASCII.quote)
        return n
    }

    /// Appends the encoded `value`; for paths where allocation is fine.
    public static func append(_ value: some Collection<UInt8>, to bytes: inout [UInt8]) {
        let contiguous = Array(value)
        contiguous.withUnsafeBytes { raw in
            appendWritten(count: encodedCount(raw), to: &bytes) { write(raw, to: $0) }
        }
    }

    static func needsQuotes(_ value: UnsafeRawBufferPointer) -> Bool {
        guard let base = value.baseAddress, value.count > 0 else {
            return true
        }
        let count = value.count
        guard count >= 8 else {
            for i in 0..<count {
                let b = base.load(fromByteOffset: i, as: UInt8.self)
                if b <= ASCII.space || b == 0x7F || b == ASCII.quote || b == ASCII.backslash {
                    return true
                }
            }
            return false
        }
        var i = 0
        while i + 8 < count {
            if wordNeedsQuotes(base.loadUnaligned(fromByteOffset: i, as: UInt64.self)) { return true }
            i += 8
        }
        // The last eight bytes, which may overlap the word before: no byte loop for the tail
        // (a byte at a time was a third of the writer's encoding of a SET's VALUE line).
        return wordNeedsQuotes(base.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
    }

    /// Whether a byte of `word` is at or below a space, `"`, `\` or 0x7F: the four tests'
    /// high-bit masks are combined before the one branch. Each mask may mark extra bytes
    /// after a true one (borrows), but is zero exactly when no byte matches.
    @inline(__always)
    private static func wordNeedsQuotes(_ word: UInt64) -> Bool {
        @inline(__always) func zeroBytes(_ x: UInt64) -> UInt64 { (x &- everyByte) & ~x }
        let control = (word &- everyByte &* 0x21) & ~word
        let quote = zeroBytes(word ^ (everyByte &* UInt64(ASCII.quote)))
        let backslash = zeroBytes(word ^ (everyByte &* UInt64(ASCII.backslash)))
        let delete = zeroBytes(word ^ (everyByte &* 0x7F))
        return (control | quote | backslash | delete) & highBits != 0
    }

    @inline(__always)
    private static func escapedCount(_ b: UInt8) -> Int {
        switch b {
        case ASCII.quote, ASCII.backslash, ASCII.lf, ASCII.cr, ASCII.tab: 2
        case 0..<0x20, 0x7F: 4
        default: 1
        }
    }

    @inline(__always)
    private static func lowerHexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
