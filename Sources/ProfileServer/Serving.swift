import ProfileCache
import ProfileModel

// The request path of every front, once, on the worker's thread. A front decodes a request and
// says what it is (`RequestShape`); the core decides when it may be served (the connection's
// order: writes in flight, reads at the fetchers, an unfinished reply), checks the role, reads
// what it reads (cache, store, fetchers), pauses a reply of many parts at the high-water mark,
// takes back a reply that failed halfway, and asks the front for the bytes of each answer.

/// What a front made of the next bytes of a connection's input (`WorkerFront.decode`).
public enum DecodedInput {
    /// Not a whole request yet.
    case needMore
    /// A request that cannot even be decoded while the connection has jobs in flight:
    /// decoding would change its bytes, which the pass that serves it must find as they came.
    case waits
    /// Bytes that hold no request (an empty line), dropped.
    case skipped(Int)
    /// Input that cannot be a request: once nothing is in flight, the front answers it
    /// (`answerMalformed`) and the connection closes after its replies.
    case malformed
    /// A whole request of `consumed` bytes, which the front keeps until it decodes the next;
    /// only a connection whose role is `requiredRole` or more may have it served.
    case request(consumed: Int, requiredRole: Role)
}

/// What a decoded request is, as far as the core's ordering and reads care.
public enum RequestShape {
    /// Answered at once by the front (`WorkerFront.execute`) from what the server holds:
    /// connection and admin commands, and every request that gets an error. It waits for
    /// every job of the connection in flight. `counted`: what its latency counts as (nil:
    /// nothing, as for an error).
    case immediate(counted: RequestKind?)
    /// A write or a transaction, which the front hands the writer in `execute`
    /// (`RequestProcessor.submit`): it queues behind the connection's writes in flight, and
    /// waits for its reads in flight.
    case write
    /// A listing (a count, the newest, a scan), which the front reads in `execute`
    /// (`RequestProcessor.readListing`): it waits for the connection's writes in flight, and
    /// goes behind its reads at the fetchers.
    case listing(RequestKind)
    /// Reads of profiles by id, which the core makes (`RequestProcessor.answerLookups`).
    case lookups(Lookups)
}

/// A request that reads profiles by id, as the core makes it: each lookup through
/// `WorkerFront.answerLookup` (or `answerPart`), then `endLookups` (or `endParts`).
///
/// A plain value; any thread may use it.
public struct Lookups {
    /// What its latency and the fetchers count it as.
    public var kind: RequestKind
    /// How many profiles it reads.
    public var count: Int
    /// Room in the reply scratch that its whole reply fits in, when it may be answered ahead
    /// of the connection's writes in flight (`HeldReplies`); 0: it waits for them.
    public var heldReplyRoom: Int
    /// Whether its reply is one part per id, each answered from its id alone
    /// (`WorkerFront.answerPart`), and an end (`endParts`): such a reply pauses at the
    /// high-water mark and is finished as the client reads (`UnfinishedLookups`).
    public var inParts: Bool

    @inlinable
    public init(kind: RequestKind, count: Int, heldReplyRoom: Int, inParts: Bool = false) {
        self.kind = kind
        self.count = count
        self.heldReplyRoom = heldReplyRoom
        self.inParts = inParts
    }
}

extension RequestProcessor {
    /// Serves the whole requests at the start of `bytes` that `front` decodes; returns how
    /// many bytes it used (`WorkerFront.serve`).
    ///
    /// Stops at the per-wake-up budget, when replies must pause, when a request must wait for
    /// the connection's jobs in flight (the front puts it back, to be decoded again), at an
    /// unfinished reply, and at a request that ends the connection; sets `needsMoreInput`
    /// when it stopped for want of bytes.
    @inlinable
    public func serve<Front: WorkerFront>(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int,
                                          front: Front) -> Int {
        var used = 0
        var budget = requestsPerWakeup
        let session = front.session(of: connection)
        let gathered = front.beginServing(bytes, count, on: connection, session: session)
        // Two or more: the cache's memory misses for them overlap.
        if gathered >= 2 { cache.prefetch(UnsafeMutableBufferPointer(rebasing: lookahead[0..<gathered])) }
        while used < count && budget > 0 && connection.isServing && connection.unfinishedReply == nil {
            if repliesMustPause(connection) { break }
            switch front.decode(UnsafeMutableRawBufferPointer(start: bytes + used, count: count - used), on: connection,
                                session: session) {
            case .needMore:
                connection.needsMoreInput = true
                return used
            case .waits:
                return used
            case .skipped(let consumed):
                used += consumed
            case .malformed:
                guard connection.jobsInFlight == 0 else {
                    front.putBack(on: connection, session: session)
                    return used
                }
                front.answerMalformed(on: connection)
                connection.phase = .closing
                return count
            case .request(let consumed, let requiredRole):
                guard serveDecoded(connection, requiredRole: requiredRole, front: front, session: session) else {
                    front.putBack(on: connection, session: session)
                    return used
                }
                used += consumed
                budget -= 1
            }
        }
        return used
    }

    /// Serves the request `front` decoded, in the connection's order; false, having done
    /// nothing, when it must wait for the connection's jobs in flight: only writes go behind
    /// writes, only reads the fetchers make go behind reads, and lookups may be answered
    /// ahead of writes (`answerAhead`); any other reply would overtake theirs.
    @inlinable @inline(__always)
    func serveDecoded<Front: WorkerFront>(_ connection: Connection, requiredRole: Role, front: Front,
                                          session: Front.Session) -> Bool {
        let writesWaiting = connection.writesInFlight > 0
        let readsWaiting = connection.readsInFlight > 0
        if requiredRole > connection.role {
            if writesWaiting || readsWaiting { return false }
            front.answerDenied(on: connection, session: session)
            return true
        }
        switch front.shape(on: connection, session: session) {
        case .lookups(let lookups):
            if writesWaiting { return answerAhead(lookups, front: front, session: session, on: connection) }
            let fetching = connection.readsInFlight
            answerLookups(lookups, mustFetch: readsWaiting, front: front, session: session, on: connection)
            if connection.readsInFlight == fetching { countPass(lookups.kind) }
        case .immediate(let counted):
            if writesWaiting || readsWaiting { return false }
            front.execute(on: connection, session: session)
            if let counted { countPass(counted) }
        case .write:
            if readsWaiting { return false }
            front.execute(on: connection, session: session)
        case .listing(let kind):
            if writesWaiting { return false }
            let fetching = connection.readsInFlight
            front.execute(on: connection, session: session)
            if connection.readsInFlight == fetching { countPass(kind) }
        }
        return true
    }

    /// Makes the lookups of the request `front` decoded: from the cache, else the store this
    /// worker reads. When the fetchers must read one (`NeedsFetch`), or `mustFetch` (reads of
    /// the connection are with them already, to be answered in order), all of them go to the
    /// fetchers; when the store fails, the reply made so far is taken back and replaced with
    /// the front's store error. A reply in parts pauses where replies must
    /// (`repliesMustPause`), its ids left kept to be answered as the client reads.
    @inlinable @inline(__always)
    public func answerLookups<Front: WorkerFront>(_ lookups: Lookups, mustFetch: Bool, front: Front, session: Front.Session,
                                                  on connection: Connection) {
        if mustFetch { return fetchLookups(lookups, NeedsFetch.miss, front: front, on: connection) }
        if lookups.count == 1 && !lookups.inParts {
            // The commonest request: a lookup that throws has written and counted nothing
            // (`WorkerFront.answerLookup`), so there is nothing to take back.
            do {
                try front.answerLookup(0, on: connection, session: session)
                front.endLookups(on: connection)
            } catch {
                lookupsFailed(error, lookups, since: nil, front: front, on: connection)
            }
            return
        }
        let mark = ReplyMark(self, connection)
        do {
            if lookups.inParts {
                for index in 0..<lookups.count {
                    if index > 0 && repliesMustPause(connection) {
                        return pauseParts(lookups, at: index, since: mark, front: front, on: connection)
                    }
                    guard let userId = front.lookupUserId(index) else { preconditionFailure("a part without an id") }
                    try front.answerPart(of: userId, on: connection)
                }
                front.endParts(on: connection)
            } else {
                for index in 0..<lookups.count { try front.answerLookup(index, on: connection, session: session) }
                front.endLookups(on: connection)
            }
        } catch {
            lookupsFailed(error, lookups, since: mark, front: front, on: connection)
        }
    }

    /// Lookups that could not be made here: a `NeedsFetch` sends them all to the fetchers, the
    /// counters and the reply taken back to where they began (`mark`; nil: nothing was
    /// written); any other error is the store's, and the reply becomes the front's store error.
    @usableFromInline
    func lookupsFailed(_ error: any Error, _ lookups: Lookups, since mark: ReplyMark?, front: any WorkerFront,
                       on connection: Connection) {
        if let mark { takeBack(since: mark, on: connection) }
        if let reason = error as? NeedsFetch {
            if let mark { counters = mark.counters }
            fetchLookups(lookups, reason, front: front, on: connection)
        } else {
            front.answerStoreFailure(storeFailureReason(error), on: connection)
        }
    }

    /// Hands every lookup of the request `front` decoded to the fetchers, which answer and
    /// count them; lookups that name no profile go along as the request's arguments only.
    @usableFromInline
    func fetchLookups(_ lookups: Lookups, _ reason: NeedsFetch, front: any WorkerFront, on connection: Connection) {
        if reason == .leaseExpired { counters.leaseExpiredReads += 1 }
        var read: [Int] = []
        var tickets: [FillTicket?] = []
        for index in 0..<lookups.count {
            guard let userId = front.lookupUserId(index) else { continue }
            read.append(front.argumentIndex(ofLookup: index))
            tickets.append(fillTicket(userId))
        }
        submitFetch(.lookups, answer: front.fetchAnswer(for: lookups.kind, restOfParts: false), kind: lookups.kind,
                    arguments: front.argumentCount, argument: { front.argument($0) }, lookups: read,
                    keyPrefix: front.keyPrefixCount, tickets: tickets, connection)
    }

    /// Lookups decoded while writes of the connection are in flight: answered now when none of
    /// those writes touches their ids, their reply held until theirs are written
    /// (`HeldReplies`). False, having done nothing, when they must wait instead.
    @usableFromInline
    func answerAhead<Front: WorkerFront>(_ lookups: Lookups, front: Front, session: Front.Session, on connection: Connection) -> Bool {
        guard lookups.heldReplyRoom > 0, mayAnswerAhead(needing: lookups.heldReplyRoom, on: connection) else { return false }
        for index in 0..<lookups.count {
            // A lookup that names no profile reads nothing a write changes.
            if let userId = front.lookupUserId(index), writesInFlight(touch: userId, on: connection) { return false }
        }
        holdReply(on: connection) { answerLookups(lookups, mustFetch: false, front: front, session: session, on: connection) }
        countPass(lookups.kind)
        return true
    }

    /// A reply in parts paused before lookup `next`: what was made of it waits in the
    /// connection's queue, held back until every id left is in the cache
    /// (`continueLookups`), and the ids left are kept.
    @usableFromInline
    func pauseParts(_ lookups: Lookups, at next: Int, since mark: ReplyMark, front: any WorkerFront, on connection: Connection) {
        spill(connection)
        connection.unfinishedReply = UnfinishedLookups(lookups, next: next, replyStart: mark.queued + mark.count,
                                                       counted: counters.lookups(since: mark.counters)) {
            front.lookupUserId($0)!
        }
    }
}

/// Where a reply began, and the counters then: what a store failure or a fetch halfway takes
/// back to.
@usableFromInline
struct ReplyMark {
    let count: Int
    let queued: Int
    let counters: RequestCounters

    @usableFromInline
    init(_ processor: RequestProcessor, _ connection: Connection) {
        count = processor.out.count
        queued = connection.queuedOutput
        counters = processor.counters
    }
}

extension RequestCounters {
    /// What the lookups counted since `earlier`: the counters a reply in parts moved.
    func lookups(since earlier: RequestCounters) -> RequestCounters {
        var counted = RequestCounters()
        counted.getLookups = getLookups - earlier.getLookups
        counted.getHits = getHits - earlier.getHits
        counted.getMisses = getMisses - earlier.getMisses
        counted.cacheHits = cacheHits - earlier.cacheHits
        counted.cacheMisses = cacheMisses - earlier.cacheMisses
        return counted
    }

    /// Takes back what `lookups(since:)` counted: the request is counted again elsewhere.
    mutating func takeBack(_ counted: RequestCounters) {
        getLookups -= counted.getLookups
        getHits -= counted.getHits
        getMisses -= counted.getMisses
        cacheHits -= counted.cacheHits
        cacheMisses -= counted.cacheMisses
    }
}

extension WorkerFront {
    /// A front whose lookups are never in parts (`Lookups.inParts`) is never asked for one.
    public func answerPart(of userId: UnsafeRawBufferPointer, on connection: Connection) throws {
        preconditionFailure("\(Self.self) makes no reply in parts")
    }

    public func endParts(on connection: Connection) {
        preconditionFailure("\(Self.self) makes no reply in parts")
    }
}
