import ProfileSystem

/// SCAN's cursors: Redis clients read a cursor as an unsigned 64-bit number, and a scan in
/// key order resumes after a key of up to 128 bytes, so each cursor handed out names the
/// last key of its batch here. A scan may go on over any connection, as a client's pool
/// hands them out.
///
/// The most recent `capacity` cursors are kept; an older one is unknown and gets
/// `-ERR invalid cursor`, as does one from before a restart.
///
/// Thread-safe: every worker uses it, under its lock (SCAN is not on the hot path).
final class ScanCursors: @unchecked Sendable {
    static let capacity = 65_536
    private let lock = ConditionLock()
    private var lastKeys: [UInt64: [UInt8]] = [:]
    /// Cursors in the order they were made, for dropping the oldest.
    private var order: [UInt64] = []
    private var oldest = 0
    private var next: UInt64

    init() {
        // Random high bits: a cursor from an earlier run of the server is never taken for one
        // of this run's.
        next = UInt64.random(in: 1 ... (1 << 62)) << 1
    }

    /// A new cursor that resumes after `userId`.
    func cursor(after userId: UnsafeRawBufferPointer) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        next &+= 1
        if next == 0 { next = 1 }
        let cursor = next
        lastKeys[cursor] = Array(userId)
        if order.count < Self.capacity {
            order.append(cursor)
        } else {
            lastKeys[order[oldest]] = nil
            order[oldest] = cursor
            oldest = (oldest + 1) % Self.capacity
        }
        return cursor
    }

    /// The id a cursor resumes after, or nil for a cursor this server does not know.
    func userId(after cursor: UInt64) -> [UInt8]? {
        lock.lock()
        defer { lock.unlock() }
        return lastKeys[cursor]
    }
}
