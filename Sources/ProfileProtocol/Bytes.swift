import Glibc

/// The bytes the protocol's syntax is made of.
enum ASCII {
    static let tab: UInt8 = 0x09
    static let lf: UInt8 = 0x0A
    static let cr: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let quote: UInt8 = 0x22
    static let backslash: UInt8 = 0x5C
}

/// Copies the bytes of `text` to `out`; returns how many.
@inline(__always) @usableFromInline
func copyBytes(_ text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
    let count = text.utf8CodeUnitCount
    out.copyMemory(from: text.utf8Start, byteCount: count)
    return count
}

/// Copies `bytes` to `out`; returns how many.
@inline(__always)
func copyBytes(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
    if let base = bytes.baseAddress {
        out.copyMemory(from: base, byteCount: bytes.count)
    }
    return bytes.count
}

/// Whether `bytes` holds exactly the bytes of `text`, without allocating.
@inline(__always)
func bytesEqual(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
    bytes.count == text.utf8CodeUnitCount
        && (bytes.count == 0 || memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0)
}

/// Whether `bytes` holds exactly the bytes of `text`; for the generic, non-hot conveniences.
func bytesEqual(_ bytes: some Collection<UInt8>, _ text: StaticString) -> Bool {
    text.withUTF8Buffer { bytes.elementsEqual($0) }
}

/// Digits in the decimal form of `value`.
func decimalCount(_ value: UInt64) -> Int {
    var count = 1
    var rest = value / 10
    while rest > 0 {
        count += 1
        rest /= 10
    }
    return count
}

/// Writes `value` in decimal at `out`; returns how many bytes.
func writeDecimal(_ value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
    let count = decimalCount(value)
    var rest = value
    var i = count
    repeat {
        i -= 1
        out.storeBytes(of: UInt8(truncatingIfNeeded: rest % 10) &+ 0x30, toByteOffset: i, as: UInt8.self)
        rest /= 10
    } while rest > 0
    return count
}

/// Grows `bytes` by `count` and lets `write` fill the new tail; for the
/// `[UInt8]` conveniences over the pointer-based writers.
func appendWritten(count: Int, to bytes: inout [UInt8], _ write: (UnsafeMutableRawPointer) -> Int) {
    let start = bytes.count
    bytes.append(contentsOf: repeatElement(0, count: count))
    let written = bytes.withUnsafeMutableBytes { write($0.baseAddress! + start) }
    precondition(written == count, "a writer disagreed with its own count")
}

// Eight bytes at a time: whether any byte of a word loaded from eight bytes has a
// property. The answers are exact: a borrow can only start at a byte that has it.

/// 0x01 in every byte; times a byte value, that value in every byte.
let everyByte: UInt64 = 0x0101_0101_0101_0101
/// The high bit of every byte.
let highBits: UInt64 = 0x8080_8080_8080_8080

/// Whether some byte of `word` is below `limit`, which must be at most 0x80.
@inline(__always)
func hasByte(below limit: UInt8, in word: UInt64) -> Bool {
    (word &- everyByte &* UInt64(limit)) & ~word & highBits != 0
}

/// Whether some byte of `word` equals `value`.
@inline(__always)
func hasByte(_ value: UInt8, in word: UInt64) -> Bool {
    hasByte(below: 1, in: word ^ (everyByte &* UInt64(value)))
}

/// Whether some byte of `word` is 0x80 or above.
@inline(__always)
func hasNonASCIIByte(in word: UInt64) -> Bool {
    word & highBits != 0
}

/// How many bytes at the start of `word` lie in `limit`...0x7F, reading the bytes in
/// memory order (the word must be loaded little-endian); 8 when all do. `limit` must be at
/// most 0x80. The first byte outside the range is found exactly: up to it, no byte borrows.
@inline(__always)
func leadingASCIIBytes(atLeast limit: UInt8, in word: UInt64) -> Int {
    // A byte's high bit is set here when it is 0x80 or above, or when it is below `limit`.
    let outside = ((word &- everyByte &* UInt64(limit)) | word) & highBits
    return outside.trailingZeroBitCount >> 3
}
