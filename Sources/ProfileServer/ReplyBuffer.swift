/// A worker's scratch space for the replies of the connection it is serving right now.
///
/// Replies are encoded straight into this memory; when the connection's pass ends the bytes
/// go to the socket in one write, and only what the socket does not take is copied into the
/// connection's own queue. Owned by one worker thread.
public struct ReplyBuffer: ~Copyable {
    public let base: UnsafeMutableRawPointer
    public let capacity: Int
    public var count = 0

    package init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    // Inlinable: the fronts, in modules of their own, write every reply through these.
    @inlinable public var remaining: Int { capacity - count }
    @inlinable public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
    @inlinable public var end: UnsafeMutableRawPointer { base + count }

    @inlinable
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        (base + count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        count += bytes.count
    }
}
