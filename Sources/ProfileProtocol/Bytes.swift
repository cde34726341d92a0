import Glibc
import WireBytes

/// The bytes the protocol's syntax is made of.
enum ASCII {
    static let tab: UInt8 = 0x09
    static let lf: UInt8 = 0x0A
    static let cr: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let quote: UInt8 = 0x22
    static let backslash: UInt8 = 0x5C
}

/// Whether `bytes` holds exactly the bytes of `text`; for the generic, non-hot conveniences.
func bytesEqual(_ bytes: some Collection<UInt8>, _ text: StaticString) -> Bool {
    text.withUTF8Buffer { bytes.elementsEqual($0) }
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
