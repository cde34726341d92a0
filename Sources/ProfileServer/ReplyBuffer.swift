/// A worker's scratch space for the replies of the connection it is serving right now.
///
/// Replies are encoded straight into this memory; when the connection's pass ends the bytes
/// go to the socket in one write, and only what the socket does not take is copied into the
/// connection's own queue. Owned by one worker thread.
package struct ReplyBuffer: ~Copyable {
    package let base: UnsafeMutableRawPointer
    package let capacity: Int
    package var count = 0

    package init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    package var remaining: Int { capacity - count }
    package var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
    package var end: UnsafeMutableRawPointer { base + count }

    package mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        (base + count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        count += bytes.count
    }
}
