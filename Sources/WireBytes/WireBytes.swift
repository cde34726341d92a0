import Glibc

// Byte-level pieces both wire formats (the line protocol and RESP) and the server's request
// paths write with. Inlinable: they sit on the request path, where a call per reply counts.
// Stateless; any thread.

/// Copies the bytes of `text` to `out`; returns how many.
@inlinable @inline(__always)
public func copyBytes(_ text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
    let count = text.utf8CodeUnitCount
    out.copyMemory(from: text.utf8Start, byteCount: count)
    return count
}

/// Copies `bytes` to `out`; returns how many.
@inlinable @inline(__always)
public func copyBytes(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
    if let base = bytes.baseAddress {
        out.copyMemory(from: base, byteCount: bytes.count)
    }
    return bytes.count
}

/// A fixed text's bytes, for the calls that take any bytes.
@inlinable @inline(__always)
public func textBytes(_ text: StaticString) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
}

/// Whether `bytes` holds exactly the bytes of `text`, without allocating.
@inlinable @inline(__always)
public func bytesEqual(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
    bytes.count == text.utf8CodeUnitCount
        && (bytes.count == 0 || memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0)
}

/// Whether two views hold the same bytes.
@inlinable @inline(__always)
public func bytesEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    a.count == b.count && (a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0)
}

/// Digits in the decimal form of `value`.
@inlinable
public func decimalCount(_ value: UInt64) -> Int {
    var count = 1
    var rest = value / 10
    while rest > 0 {
        count += 1
        rest /= 10
    }
    return count
}

/// Writes `value` in decimal at `out`; returns how many bytes.
@inlinable
public func writeDecimal(_ value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
    // Most numbers written are lengths and counts under 100: no count, no loop.
    if value < 10 {
        out.storeBytes(of: UInt8(truncatingIfNeeded: value) &+ 0x30, as: UInt8.self)
        return 1
    }
    if value < 100 {
        let tens = UInt8(truncatingIfNeeded: value / 10)
        out.storeBytes(of: tens &+ 0x30, as: UInt8.self)
        out.storeBytes(of: UInt8(truncatingIfNeeded: value) &- tens &* 10 &+ 0x30, toByteOffset: 1, as: UInt8.self)
        return 2
    }
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

/// A command name of 3 to 8 bytes packed into one little-endian word with ASCII capitals
/// lowered, for matching against each name's lower-case word; nil for any other length.
///
/// OR-ing 0x20 into each byte lowers ASCII capitals and never turns any other byte into a
/// lower-case letter, so comparing words is exact. Two four-byte loads cover 4 to 8 bytes,
/// overlapping below 8: a byte that both hold lands in the same place from each, so OR-ing
/// them is exact. Three bytes take a two-byte and a one-byte load.
@inlinable @inline(__always)
public func lowercasedNameWord(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
    let count = bytes.count
    guard count >= 3 && count <= 8, let base = bytes.baseAddress else { return nil }
    var word: UInt64
    if count >= 4 {
        let head = UInt64(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        let tail = UInt64(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)))
        word = head | tail << (8 * (count - 4))
    } else {
        let head = UInt64(UInt16(littleEndian: base.loadUnaligned(as: UInt16.self)))
        word = head | UInt64(base.load(fromByteOffset: 2, as: UInt8.self)) << 16
    }
    return word | 0x2020_2020_2020_2020 >> (64 - 8 * count)
}
