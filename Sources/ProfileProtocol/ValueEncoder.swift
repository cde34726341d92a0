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
        var i = 0
        while i + 8 <= value.count {
            let word = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            if hasByte(below: 0x21, in: word) || hasByte(ASCII.quote, in: word)
                || hasByte(ASCII.backslash, in: word) || hasByte(0x7F, in: word) {
                return true
            }
            i += 8
        }
        while i < value.count {
            let b = base.load(fromByteOffset: i, as: UInt8.self)
            if b <= ASCII.space || b == 0x7F || b == ASCII.quote || b == ASCII.backslash {
                return true
            }
            i += 1
        }
        return false
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
