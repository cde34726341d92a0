import ProfileServer
import ProfileSystem

/// SCAN's cursors: a scan in key order resumes after a key of up to 128 bytes, so each cursor
/// handed out names the last key of its batch here. A scan may go on over any connection, as a
/// client's pool hands them out. Every cursor is at most 2^53 - 1: some clients keep a cursor
/// as an IEEE double (node-redis, as a JavaScript number), which holds exactly only integers
/// up to that, as Redis's cursors are in practice.
///
/// The most recent `capacity` cursors are kept; an older one is unknown and gets
/// `-ERR invalid cursor`, as does one from before a restart.
///
/// Thread-safe: every worker uses it, under its lock (SCAN is not on the hot path).
final class ScanCursors: @unchecked Sendable {
    static let capacity = 65_536
    /// The largest cursor handed out: the largest integer a double holds exactly.
    static let largest: UInt64 = (1 << 53) - 1
    private let lock = ConditionLock()
    private var lastKeys: [UInt64: [UInt8]] = [:]
    /// Cursors in the order they were made, for dropping the oldest.
    private var order: [UInt64] = []
    private var oldest = 0
    private var next: UInt64

    /// Starts at a random point of the cursor space, so that a cursor from an earlier run of
    /// the server is almost never taken for one of this run's; `first` pins the point, for tests.
    init(first: UInt64 = UInt64.random(in: 1 ... ScanCursors.largest)) {
        precondition(first >= 1 && first <= Self.largest)
        next = first - 1
    }

    /// A new cursor that resumes after `userId`.
    func cursor(after userId: UnsafeRawBufferPointer) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        // 0 means "start" to clients, so the count wraps from the largest back to 1.
        next = next == Self.largest ? 1 : next + 1
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
