import WireBytes
/// The bytes RESP's syntax is made of.
enum ASCII {
    static let nul: UInt8 = 0x00
    static let tab: UInt8 = 0x09
    static let lf: UInt8 = 0x0A
    static let cr: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let doubleQuote: UInt8 = 0x22
    static let dollar: UInt8 = 0x24
    static let singleQuote: UInt8 = 0x27
    static let star: UInt8 = 0x2A
    static let minus: UInt8 = 0x2D
    static let zero: UInt8 = 0x30
    static let backslash: UInt8 = 0x5C
}

/// Bytes in the decimal form of `value`, its minus sign included.
func decimalCount(_ value: Int64) -> Int {
    value < 0 ? 1 + decimalCount(value.magnitude) : decimalCount(value.magnitude)
}

/// Writes `value` in decimal at `out`, with a minus sign when negative; returns how many bytes.
func writeDecimal(_ value: Int64, to out: UnsafeMutableRawPointer) -> Int {
    guard value < 0 else {
        return writeDecimal(value.magnitude, to: out)
    }
    out.storeBytes(of: ASCII.minus, as: UInt8.self)
    return 1 + writeDecimal(value.magnitude, to: out + 1)
}

/// Reads a whole field as Redis's `string2ll` does, which is stricter than most parsers:
/// 1 to 20 bytes, `0`, or an optional `-` and a digit 1-9 followed by digits, within the
/// range of Int64. So `+1`, `01`, `-0`, ` 1` and the empty field are not numbers.
func redisInteger(_ base: UnsafeRawPointer, count: Int) -> Int64? {
    // Redis refuses 21 bytes or more before reading any (LONG_STR_SIZE).
    guard count > 0 && count < 21 else { return nil }
    var i = 0
    let negative = base.load(as: UInt8.self) == ASCII.minus
    if negative {
        i = 1
    } else if count == 1 && base.load(as: UInt8.self) == ASCII.zero {
        return 0
    }
    guard i < count else { return nil }
    let first = base.load(fromByteOffset: i, as: UInt8.self) &- ASCII.zero
    guard first >= 1 && first <= 9 else { return nil }
    var magnitude = UInt64(first)
    i += 1
    while i < count {
        let digit = base.load(fromByteOffset: i, as: UInt8.self) &- ASCII.zero
        guard digit <= 9 else { return nil }
        let (times10, overflowA) = magnitude.multipliedReportingOverflow(by: 10)
        let (sum, overflowB) = times10.addingReportingOverflow(UInt64(digit))
        guard !overflowA && !overflowB else { return nil }
        magnitude = sum
        i += 1
    }
    if negative {
        guard magnitude <= Int64.min.magnitude else { return nil }
        return Int64(truncatingIfNeeded: 0 &- magnitude)
    }
    guard magnitude <= UInt64(Int64.max) else { return nil }
    return Int64(magnitude)
}

/// Builds a reply in one pass that either writes or only counts, so a reply's size
/// function and its writer cannot disagree.
struct ReplyBuilder {
    /// Where to write; nil to count only.
    private let out: UnsafeMutableRawPointer?
    private(set) var count = 0

    init(_ out: UnsafeMutableRawPointer?) {
        self.out = out
    }

    mutating func put(_ text: StaticString) {
        if let out {
            out.advanced(by: count).copyMemory(from: text.utf8Start, byteCount: text.utf8CodeUnitCount)
        }
        count += text.utf8CodeUnitCount
    }

    mutating func put(_ byte: UInt8) {
        out?.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    /// Appends `bytes` with every CR and LF turned into a space, as Redis does to error
    /// texts that quote what a client sent: an error reply is one line.
    mutating func putOneLine(_ bytes: UnsafeRawBufferPointer) {
        if let out {
            for (i, b) in bytes.enumerated() {
                out.storeBytes(of: b == ASCII.cr || b == ASCII.lf ? ASCII.space : b, toByteOffset: count + i, as: UInt8.self)
            }
        }
        count += bytes.count
    }
}

extension UnsafeRawBufferPointer {
    /// The bytes before the first NUL, at most `limit` of them: what C's `%.<limit>s` prints
    /// of this argument in Redis's error texts.
    func cString(atMost limit: Int) -> UnsafeRawBufferPointer {
        let window = Swift.min(count, limit)
        guard let base = baseAddress, window > 0 else { return UnsafeRawBufferPointer(start: baseAddress, count: 0) }
        var end = 0
        while end < window && base.load(fromByteOffset: end, as: UInt8.self) != ASCII.nul {
            end += 1
        }
        return UnsafeRawBufferPointer(start: base, count: end)
    }
}
