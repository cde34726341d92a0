import Glibc

/// A growable byte queue: requests are written at the end and sent from the front, replies
/// are received at the end and parsed from the front. No allocation once it has grown.
///
/// Used by the one load thread that owns its connection.
///
/// Its mutable fields are `@exclusivity(unchecked)`: only the owning thread touches them, and
/// the runtime's dynamic exclusivity checks were a third of the load loop's instructions.
final class ByteBuffer {
    @exclusivity(unchecked) private(set) var base: UnsafeMutableRawPointer
    @exclusivity(unchecked) private(set) var capacity: Int
    @exclusivity(unchecked) private(set) var start = 0
    @exclusivity(unchecked) private(set) var end = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    var count: Int { end - start }
    var isEmpty: Bool { end == start }
    var readable: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + start, count: end - start) }

    /// Room for at least `n` more bytes at the end: moves the unread bytes to the front or grows.
    @inline(__always)
    func reserve(_ n: Int) -> UnsafeMutableRawPointer {
        if capacity - end < n { makeRoom(n) }
        return base + end
    }

    private func makeRoom(_ n: Int) {
        let unread = end - start
        if start > 0 && capacity - unread >= n {
            memmove(base, base + start, unread)
        } else {
            var newCapacity = capacity * 2
            while newCapacity - unread < n { newCapacity *= 2 }
            let grown = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
            grown.copyMemory(from: base + start, byteCount: unread)
            base.deallocate()
            base = grown
            capacity = newCapacity
        }
        start = 0
        end = unread
    }

    /// Free bytes at the end right now (for `recv`).
    var spaceAtEnd: Int { capacity - end }

    @inline(__always)
    func commit(_ n: Int) { end += n }

    @inline(__always)
    func consume(_ n: Int) {
        start += n
        if start == end { start = 0; end = 0 }
    }

    @inline(__always)
    func append(_ literal: StaticString) {
        let n = literal.utf8CodeUnitCount
        reserve(n).copyMemory(from: literal.utf8Start, byteCount: n)
        end += n
    }

    @inline(__always)
    func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            reserve(raw.count).copyMemory(from: raw.baseAddress!, byteCount: raw.count)
            end += raw.count
        }
    }

    @inline(__always)
    func append(byte: UInt8) {
        reserve(1).storeBytes(of: byte, as: UInt8.self)
        end += 1
    }

    /// Appends `n` in decimal.
    func append(decimal n: Int) {
        var digits = 1
        var rest = n / 10
        while rest > 0 { digits += 1; rest /= 10 }
        let out = reserve(digits)
        var value = n
        for i in stride(from: digits - 1, through: 0, by: -1) {
            out.storeBytes(of: UInt8(0x30 + value % 10), toByteOffset: i, as: UInt8.self)
            value /= 10
        }
        end += digits
    }
}
