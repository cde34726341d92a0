import ProfileServer

/// An MGET whose reply paused (`RequestProcessor.repliesMustPause`): the rest of the reply is
/// made as the client reads and as the loop's turns come (`LineWorkerFront.continueLookups`),
/// so a connection never holds more than the high-water mark plus one profile's reply, and no
/// pass over it holds up the other connections for long.
///
/// Before any of the reply is sent, every id left is read into the cache, a few per pass
/// (`preRead`): a store failure found then still replaces the whole reply with ERROR STORE
/// (PROTOCOL.md), so the reply made so far is held back (`holdsReply`) until they all are.
///
/// Every id of the MGET is copied out of the request line, which is then done with (a fetch
/// of a shared store reads all of them again); the copy counts in the connection's memory.
/// Threading: the worker thread that owns the connection.
final class UnfinishedLookups: UnfinishedReply {
    private var bytes: [UInt8] = []
    /// Where each id ends in `bytes`.
    private var ends: [Int] = []
    /// The next id to answer.
    private(set) var next: Int
    /// The next id to read into the cache before the reply may be sent.
    private(set) var preRead: Int
    /// Where the MGET's reply begins in the connection's queue, to drop it if the store fails
    /// while it is held back.
    let replyStart: Int
    /// What answering the ids before `next` added to the worker's counters, taken back when
    /// the whole MGET goes to the fetchers instead.
    let counted: RequestCounters

    /// Every one of the MGET's `count` ids (`id`), of which those before `next` are answered.
    init(_ count: Int, next: Int, replyStart: Int, counted: RequestCounters, id: (Int) -> UnsafeRawBufferPointer) {
        self.next = next
        preRead = next
        self.replyStart = replyStart
        self.counted = counted
        ends.reserveCapacity(count)
        for index in 0..<count {
            bytes.append(contentsOf: id(index))
            ends.append(bytes.count)
        }
    }

    var isDone: Bool { next == ends.count }
    var holdsReply: Bool { preRead < ends.count }

    /// Id `index`'s bytes, valid during `body`.
    private func withId<R>(_ index: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let start = index == 0 ? 0 : ends[index - 1]
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start..<ends[index]])) }
    }

    /// The next id's bytes, valid during `body`.
    func withNext<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withId(next, body) }

    func advance() { next += 1 }

    /// The next id to read into the cache, valid during `body`.
    func withNextToRead<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withId(preRead, body) }

    func advancePreRead() { preRead += 1 }

    /// Calls `body` with how many ids there are from `first` on and each of them by index,
    /// views valid during the call.
    func withIds<R>(from first: Int, _ body: (Int, (Int) -> UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { all in
            try body(ends.count - first) { index in
                let i = first + index
                let start = i == 0 ? 0 : ends[i - 1]
                return UnsafeRawBufferPointer(rebasing: all[start..<ends[i]])
            }
        }
    }

    /// What it holds, for the clients' memory.
    var byteCount: Int { bytes.capacity + ends.capacity * MemoryLayout<Int>.stride }
}

extension Connection {
    /// The line protocol's unfinished reply: an MGET's ids left to answer.
    var unfinishedLookups: UnfinishedLookups? {
        get { unfinishedReply as? UnfinishedLookups }
        set { unfinishedReply = newValue }
    }
}
