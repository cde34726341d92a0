/// Replies to reads a connection answered ahead of the writes sent before them.
///
/// In `SET a …; GET b` the GET need not wait for the SET's commit: b is not a, so the SET
/// cannot change its answer. The GET is answered at once, and its reply waits here until the
/// SET's has been written, since replies keep request order. Each reply is held behind the
/// writes the connection had taken when it was answered: it goes out once that many writes of
/// the connection are answered.
///
/// Owned by one connection; its worker's thread only.
package struct HeldReplies {
    private var bytes: [UInt8] = []
    /// Where each run of held replies ends in `bytes`, and how many of the connection's writes
    /// must be answered before it goes out; in request order.
    private var runs: [(end: Int, afterWrites: Int)] = []

    package var byteCount: Int { bytes.count }
    package var isEmpty: Bool { runs.isEmpty }

    /// Holds `reply` until the connection's first `afterWrites` writes are answered.
    package mutating func hold(_ reply: UnsafeRawBufferPointer, afterWrites: Int) {
        bytes.append(contentsOf: reply)
        if let last = runs.last, last.afterWrites == afterWrites {
            runs[runs.count - 1].end = bytes.count
        } else {
            runs.append((bytes.count, afterWrites))
        }
    }

    /// Hands over, in order, the replies whose writes are all answered, and forgets them.
    package mutating func release(answeredWrites: Int, to deliver: (UnsafeRawBufferPointer) -> Void) {
        var released = 0, end = 0
        while released < runs.count && runs[released].afterWrites <= answeredWrites {
            end = runs[released].end
            released += 1
        }
        guard released > 0 else { return }
        bytes.withUnsafeBytes { deliver(UnsafeRawBufferPointer(rebasing: $0[0..<end])) }
        bytes.removeFirst(end)
        runs.removeFirst(released)
        for i in runs.indices { runs[i].end -= end }
    }

    /// Drops everything held: the connection closed.
    package mutating func removeAll() {
        bytes.removeAll()
        runs.removeAll()
    }
}
