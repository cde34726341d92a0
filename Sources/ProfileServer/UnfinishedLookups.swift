import ProfileStore

/// Lookups in parts (an MGET) whose reply paused (`RequestProcessor.repliesMustPause`): the rest of the reply is
/// made as the client reads and as the loop's turns come (`RequestProcessor.continueLookups`),
/// so a connection never holds more than the high-water mark plus one profile's reply, and no
/// pass over it holds up the other connections for long.
///
/// Before any of the reply is sent, every id left is read into the cache, a few per pass
/// (`preRead`): a store failure found then still replaces the whole reply with ERROR STORE
/// (PROTOCOL.md), so the reply made so far is held back (`holdsReply`) until they all are.
///
/// Every id is copied out of the request, which is then done with (a fetch of a shared store
/// reads all of them again); the copy counts in the connection's memory.
/// Threading: the worker thread that owns the connection.
final class UnfinishedLookups: UnfinishedReply {
    /// What the request counts as.
    let kind: RequestKind
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

    /// Every one of the request's ids (`id`), of which those before `next` are answered.
    init(_ lookups: Lookups, next: Int, replyStart: Int, counted: RequestCounters, id: (Int) -> UnsafeRawBufferPointer) {
        kind = lookups.kind
        let count = lookups.count
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

extension RequestProcessor {
    /// How many of an unfinished reply's ids one pass looks for in the cache, and how many of
    /// those it reads from the store, before its reply may be sent: a store read costs tens of
    /// lookups, and the pass must stay short.
    static let preReadLookupsPerPass = 256
    static let preReadStoreReadsPerPass = 4

    /// Goes on with a reply in parts that paused (`UnfinishedLookups`), and ends it once its
    /// ids are all answered; true when no such reply is left unfinished.
    ///
    /// First the ids left are read into the cache, a few a pass (`preReadLookupsPerPass`,
    /// `preReadStoreReadsPerPass`), while the reply made so far is held back: a store failure
    /// then replaces the whole reply with the front's store error, and over a shared store
    /// that must read one of them, the fetchers read the whole request instead. Then the ids
    /// are answered as far as each pass may (`repliesMustPause`). The cache holds what they
    /// had by then, unless it dropped them since (or, over a shared store, its lease ran out):
    /// then the store reads them, and over a shared store the fetchers read every id left and
    /// answer the rest of the reply. If the store fails then, part of the reply is already
    /// sent and cannot be replaced: the connection is closed after what was sent, which no
    /// client can take for a whole reply. `front` is this worker's part of the connection's
    /// front: the connection may have moved to this worker since the reply paused.
    package func continueLookups(_ connection: Connection, front: any WorkerFront) -> Bool {
        guard let lookups = connection.unfinishedReply as? UnfinishedLookups else { return true }
        if lookups.holdsReply {
            var lookupsLeft = Self.preReadLookupsPerPass, storeReadsLeft = Self.preReadStoreReadsPerPass
            do {
                while lookups.holdsReply && lookupsLeft > 0 && storeReadsLeft > 0 {
                    if try lookups.withNextToRead({ try readIntoCache($0) }) { storeReadsLeft -= 1 }
                    lookups.advancePreRead()
                    lookupsLeft -= 1
                }
            } catch let reason as NeedsFetch {
                connection.dropQueuedOutput(after: lookups.replyStart)
                connection.unfinishedReply = nil
                counters.takeBack(lookups.counted)
                if reason == .leaseExpired { counters.leaseExpiredReads += 1 }
                lookups.withIds(from: 0) { count, id in
                    fetchParts(count, id: id, answer: front.fetchAnswer(for: lookups.kind, restOfParts: false), kind: lookups.kind,
                               on: connection)
                }
                return false
            } catch {
                connection.dropQueuedOutput(after: lookups.replyStart)
                connection.unfinishedReply = nil
                front.answerStoreFailure(storeFailureReason(error), on: connection)
                return true
            }
            if lookups.holdsReply { return false }
        }
        while !lookups.isDone {
            if repliesMustPause(connection) { return false }
            do {
                try lookups.withNext { try front.answerPart(of: $0, on: connection) }
            } catch is NeedsFetch {
                lookups.withIds(from: lookups.next) { count, id in
                    fetchParts(count, id: id, answer: front.fetchAnswer(for: lookups.kind, restOfParts: true), kind: nil,
                               on: connection)
                }
                connection.unfinishedReply = nil
                return false
            } catch {
                connection.unfinishedReply = nil
                abandonPartlySentReply(on: connection, "\(error)")
                return false
            }
            lookups.advance()
        }
        connection.unfinishedReply = nil
        front.endParts(on: connection)
        return true
    }

    /// Hands `count` ids to the fetchers as a request of those ids alone.
    private func fetchParts(_ count: Int, id: (Int) -> UnsafeRawBufferPointer, answer: any ReadAnswer, kind: RequestKind?,
                            on connection: Connection) {
        submitFetch(.lookups, answer: answer, kind: kind, arguments: count, argument: id, lookups: Array(0..<count),
                    keyPrefix: 0, tickets: (0..<count).map { fillTicket(id($0)) }, connection)
    }

    /// Reads `userId` from the store into the cache unless the cache holds it or its absence;
    /// true when it read the store.
    /// - Throws: the store's error; `NeedsFetch.miss` when the store is read by the fetchers.
    private func readIntoCache(_ userId: UnsafeRawBufferPointer) throws -> Bool {
        guard case .miss(let ticket) = cache.lookup(userId, copyingReplyInto: UnsafeMutableRawBufferPointer(start: out.end, count: 0))
        else { return false }
        let scratch = valueScratch
        try readMissed(userId, ticket: ticket, encodingAt: { _ in scratch }) { _ in }
        return true
    }

    /// A store read failed in the middle of a reply already partly sent: no error can replace
    /// it (PROTOCOL.md, Backpressure), so the connection closes after what was sent.
    package func abandonPartlySentReply(on connection: Connection, _ failure: String) {
        Log.warn("a store read failed in the middle of a reply already partly sent; closing the connection",
                 ["error": failure])
        counters.errors += 1
        connection.phase = .closing
    }
}
