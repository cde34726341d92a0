import ProfileServer
import CLibevent
import Glibc
import ProfileCache
import ProfileModel
import ProfileProtocol
import ProfileStore
import WireBytes

/// The line protocol's front of one worker (docs/PROTOCOL.md): frames and decodes its
/// connections' request lines, checks each request, and answers it through the worker's
/// request path, in the line protocol.
///
/// Owned by its worker and used by that worker's thread only.
final class LineWorkerFront: WorkerFront {
    /// The worker's. The processor and the cache are `let`s here so that the request path
    /// reaches them without reference counting.
    let processor: RequestProcessor
    let cache: ProfileCache
    let decoder = RequestDecoder()
    /// `--max-line`: the longest request line.
    let maxLine: Int

    init(processor: RequestProcessor, maxLine: Int) {
        self.processor = processor
        self.maxLine = maxLine
        cache = processor.cache
    }

    /// The line protocol's `WorkerFront.serve`.
    func serve(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int {
        var used = 0
        var budget = processor.requestsPerWakeup
        prefetchLookups(bytes, count)
        // An MGET left unfinished comes first: nothing after it is answered before it ends.
        while used < count && budget > 0 && connection.isServing && connection.unfinishedReply == nil {
            if processor.repliesMustPause(connection) { break }
            let rest = UnsafeMutableRawBufferPointer(start: bytes + used, count: count - used)
            var frame = LineFramer.nextLine(in: UnsafeRawBufferPointer(rest), maxLine: maxLine)
            if frame == .needMore && rest.count >= maxLine && byteBeyondLineArrived(connection) { frame = .tooLong }
            switch frame {
            case .needMore:
                connection.needsMoreInput = true
                return used
            case .tooLong:
                guard connection.jobsInFlight == 0 else { return used }
                reply(error: .tooLong, to: connection)
                connection.phase = .closing
                return count
            case .line(let contentCount, let consumed):
                let line = UnsafeMutableRawBufferPointer(start: rest.baseAddress, count: contentCount)
                guard serveLine(line, on: connection) else { return used }
                used += consumed
                budget -= 1
            }
        }
        return used
    }

    /// Whether a byte has arrived after a line's worth of bytes without an LF, which makes the
    /// line too long. The contract's server never buffers more than the limit, so the byte is
    /// looked at in the socket, not taken in. At the end of the stream the peer has closed, and
    /// the unfinished line gets no reply.
    private func byteBeyondLineArrived(_ connection: Connection) -> Bool {
        switch connection.transport.peekByte() {
        case .done: return true
        case .endOfStream: connection.peerClosed = true
        case .waitsForWritable: connection.waitsForWritable = true
        case .wouldBlock, .failed: break
        }
        return false
    }

    /// Serves one request line. Returns false, leaving the line untouched, when it must wait
    /// for the connection's requests in flight: only requests of the same kind may go on
    /// (writes behind writes, a shared store's reads behind reads), since they are answered
    /// in order, and reads whose replies can wait for the writes' (`answerAhead`); any other
    /// reply would overtake theirs.
    private func serveLine(_ line: UnsafeMutableRawBufferPointer, on connection: Connection) -> Bool {
        let writesWaiting = connection.writesInFlight > 0
        let readsWaiting = connection.readsInFlight > 0
        let waiting = writesWaiting || readsWaiting
        // A plain GET needs neither the tokenizer nor the argument checks (see `plainGetUserId`).
        if !waiting && connection.role >= Verb.get.requiredRole,
           let userId = RequestLines.plainGetUserId(UnsafeRawBufferPointer(line)) {
            lookUpOne(.get, userId, mustFetch: false, connection)
            if connection.readsInFlight == 0 { processor.countPass(.get) }
            return true
        }
        // Decoding unescapes quoted tokens in place; a line we might have to leave for later
        // must come back unchanged, so while waiting only unquoted lines are looked at.
        if waiting && line.count > 0 && memchr(line.baseAddress!, 0x22, line.count) != nil { return false }
        let verb: Verb
        switch decoder.decode(line) {
        case .empty:
            return true
        case .error(let error):
            if waiting { return false }
            reply(error: error, to: connection)
            return true
        case .request(let decoded):
            verb = decoded
        }
        if writesWaiting && !verb.isWrite { return answerAhead(verb, on: connection) }
        if readsWaiting && !verb.isFetched { return false }
        if verb.requiredRole > connection.role {
            if waiting { return false }
            reply(error: connection.role == .none ? .noAuth : .roleDenied, to: connection)
            return true
        }
        switch decoder.command() {
        case .failure(let error):
            if waiting { return false }
            reply(error: error, to: connection)
        case .success(let command):
            let fetching = connection.readsInFlight
            execute(command, on: connection, mustFetch: readsWaiting)
            if !verb.isWrite && connection.readsInFlight == fetching { processor.countPass(verb.kind) }
        }
        return true
    }

    /// A GET or EXISTS decoded while writes of the connection are in flight: answered now when
    /// none of those writes touches its id, its reply held until theirs are written
    /// (`HeldReplies`). Returns false, leaving the line for later, when it must wait instead:
    /// any other request, or one `RequestProcessor.mayAnswerAhead` refuses.
    private func answerAhead(_ verb: Verb, on connection: Connection) -> Bool {
        guard verb == .get || verb == .exists, verb.requiredRole <= connection.role,
              processor.mayAnswerAhead(needing: Self.heldReplyRoom, on: connection),
              case .success(let command) = decoder.command() else { return false }
        let userId: UnsafeRawBufferPointer
        switch command {
        case .get(let id), .exists(let id): userId = id
        default: return false
        }
        guard !processor.writesInFlight(touch: userId, on: connection) else { return false }
        processor.holdReply(on: connection) { execute(command, on: connection, mustFetch: false) }
        processor.countPass(verb.kind)
        return true
    }

    /// Room in the scratch that any one GET or EXISTS reply fits in (the longest VALUE line,
    /// or ERROR STORE with its reason), so that answering one ahead never spills the scratch.
    static let heldReplyRoom = max(LineCacheEncoding.valueLineCapacity, "ERROR STORE \n".utf8.count + RequestProcessor.storeFailureReasonBytes)

    // Inlined into serveLine, its only caller, so the command is not copied to be passed on.
    /// `mustFetch`: reads of a shared store are in flight on the connection, so a lookup goes
    /// to the fetchers too, to be answered in order, whatever the cache holds.
    @inline(__always)
    private func execute(_ command: Command, on connection: Connection, mustFetch: Bool) {
        switch command {
        case .ping:
            reply(ReplyEncoder.pong, connection)
        case .get(let userId):
            lookUpOne(.get, userId, mustFetch: mustFetch, connection)
        case .exists(let userId):
            lookUpOne(.exists, userId, mustFetch: mustFetch, connection)
        case .mget(let count):
            let decoder = self.decoder
            lookUpMany(count: count, mustFetch: mustFetch, connection) { decoder.argument($0) }
        case .count:
            processor.readListing(.count, answer: LineReadAnswer.count, kind: .count, arguments: 0,
                        argument: { _ in fatalError("COUNT has no arguments") }, connection)
        case .recent(let limit):
            processor.readListing(.recent(limit: limit), answer: LineReadAnswer.rows, kind: .recent, arguments: 0,
                        argument: { _ in fatalError("RECENT's limit is in its request") }, connection)
        case .scan(let after, let limit):
            processor.readListing(.scan(after: Array(after), limit: limit), answer: LineReadAnswer.rows, kind: .scan, arguments: 0,
                        argument: { _ in fatalError("SCAN's arguments are in its request") }, connection)
        case .stats:
            writeStatistics(connection)
        case .auth(let token):
            if processor.authenticate(token, on: connection) { reply(ReplyEncoder.ok, connection) } else { reply(error: .wrongToken, to: connection) }
        case .quit:
            reply(ReplyEncoder.bye, connection)
            connection.phase = .closing
        case .set:
            enqueue(SmallList(CollectionOfOne(JobOperation(kind: .put, userId: 0, name: .set(1), portraitUri: .set(2)))), .stored, .set, arguments: 3, connection)
        case .mset(let triples):
            let operations = SmallList((0..<triples).lazy.map {
                JobOperation(kind: .put, userId: 3 * $0, name: .set(3 * $0 + 1), portraitUri: .set(3 * $0 + 2))
            })
            enqueue(operations, .storedCount(triples), .mset, arguments: 3 * triples, connection)
        case .update(let userId, let name, let portraitUri):
            // The id, then the fields given, in order: at most three views, without an array.
            let second = name ?? portraitUri!
            let count = name != nil && portraitUri != nil ? 3 : 2
            let update = JobOperation(kind: .patch(createsMissing: false, removesEmptied: false), userId: 0,
                                      name: name != nil ? .set(1) : .keep, portraitUri: portraitUri != nil ? .set(count - 1) : .keep)
            processor.submit(WriteJob(connection: connection, operations: SmallList(CollectionOfOne(update)), answer: LineWriteAnswer.updated, kind: .update,
                            arguments: count) { $0 == 0 ? userId : $0 == 1 ? second : portraitUri! },
                   connection)
        case .del:
            enqueue(SmallList(CollectionOfOne(JobOperation(kind: .remove, userId: 0))), .deleted, .del, arguments: 1, connection)
        case .flushall:
            enqueue(SmallList(CollectionOfOne(JobOperation(kind: .removeAll, userId: -1))), .flushed, .flushall, arguments: 0, connection)
        }
    }

    private func enqueue(_ operations: SmallList<JobOperation>, _ answer: LineWriteAnswer, _ verb: Verb, arguments: Int,
                         _ connection: Connection) {
        let decoder = self.decoder
        processor.submit(WriteJob(connection: connection, operations: operations, answer: answer, kind: verb.kind, arguments: arguments) {
            decoder.argument($0)
        }, connection)
    }

    // MARK: Lookups

    /// GET/MGET/EXISTS of one id, through the core's lookup (`RequestProcessor.lookUpEncoding`):
    /// a VALUE line is the cache's own encoding, copied as it is, or encoded once where the
    /// reply goes when the store reads it.
    /// - Throws: the store's error; nothing was appended for this id then. `NeedsFetch` when
    ///   the fetchers must read it, having counted nothing.
    func lookUp(_ userId: UnsafeRawBufferPointer, exists: Bool, on connection: Connection) throws {
        let found = try processor.lookUpEncoding(userId, copying: !exists, on: connection) { row in
            reserveValueLine(row, connection)
            return processor.out.end
        }
        if let length = found {
            if exists { reply(ReplyEncoder.yes, connection) } else { processor.out.count += length }
        } else {
            appendAbsent(userId, exists: exists, connection)
        }
    }

    /// An MGET's lines and END, from the cache, else the store; once its reply must pause
    /// (`RequestProcessor.repliesMustPause`) the ids left are kept to be answered later
    /// (`UnfinishedLookups`). Its reply begins at `mark`, when the counters were `before`.
    /// - Throws: the store's error or `NeedsFetch`; the reply so far must then be taken back.
    func lookUpMGET(count: Int, on connection: Connection, since mark: RequestProcessor.Mark, countersBefore before: RequestCounters,
                    id: (Int) -> UnsafeRawBufferPointer) throws {
        for i in 0..<count {
            if i > 0 && processor.repliesMustPause(connection) {
                // What was made of the reply waits in the connection's queue, held back until
                // every id left is in the cache (`continueLookups`).
                processor.spill(connection)
                connection.unfinishedLookups = UnfinishedLookups(count, next: i, replyStart: mark.queued + mark.count,
                                                                 counted: processor.counters.lookups(since: before), id: id)
                return
            }
            try lookUp(id(i), exists: false, on: connection)
        }
        reply(ReplyEncoder.end, connection)
    }

    /// How many of an unfinished MGET's ids one pass looks for in the cache, and how many of
    /// those it reads from the store, before its reply may be sent: a store read costs tens of
    /// lookups, and the pass must stay short.
    static let preReadLookupsPerPass = 256
    static let preReadStoreReadsPerPass = 4

    /// Reads `userId` from the store into the cache unless the cache holds it or its absence;
    /// true when it read the store.
    /// - Throws: the store's error; `NeedsFetch.miss` when the store is read by the fetchers.
    private func readIntoCache(_ userId: UnsafeRawBufferPointer) throws -> Bool {
        guard case .miss(let ticket) = cache.lookup(userId, copyingReplyInto: UnsafeMutableRawBufferPointer(start: processor.out.end, count: 0))
        else { return false }
        let scratch = processor.valueScratch
        try processor.readMissed(userId, ticket: ticket, encodingAt: { _ in scratch }) { _ in }
        return true
    }

    /// Goes on with an unfinished MGET, and ends its reply once its ids are all answered; true
    /// when no MGET is left unfinished.
    ///
    /// First the ids left are read into the cache, a few a pass (`preReadLookupsPerPass`,
    /// `preReadStoreReadsPerPass`), while the reply
    /// made so far is held back: a store failure then replaces the whole reply with ERROR
    /// STORE, and over a shared store that must read one of them, the fetchers read the whole
    /// MGET instead. Then the ids are answered as far as each pass may (`repliesMustPause`).
    /// The cache holds what they had by then, unless it dropped them since (or, over a shared
    /// store, its lease ran out): then the store reads them, and over a shared store the
    /// fetchers read every id left and answer the rest of the reply. If the store fails then,
    /// part of the reply is already sent and cannot be replaced: the connection is closed after
    /// what was sent, which no client can take for a whole reply.
    func continueLookups(_ connection: Connection) -> Bool {
        guard let lookups = connection.unfinishedLookups else { return true }
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
                connection.unfinishedLookups = nil
                processor.counters.takeBack(lookups.counted)
                lookups.withIds(from: 0) { count, id in fetch(.mget, count: count, reason, connection, id: id) }
                return false
            } catch {
                connection.dropQueuedOutput(after: lookups.replyStart)
                connection.unfinishedLookups = nil
                reply(storeError: error, to: connection)
                return true
            }
            if lookups.holdsReply { return false }
        }
        while !lookups.isDone {
            if processor.repliesMustPause(connection) { return false }
            do {
                try lookups.withNext { try lookUp($0, exists: false, on: connection) }
            } catch is NeedsFetch {
                lookups.withIds(from: lookups.next) { count, id in
                    processor.submitFetch(.lookups, answer: LineReadAnswer.restOfMGET, kind: nil, arguments: count, argument: id,
                                lookups: Array(0..<count),
                                keyPrefix: 0, tickets: (0..<count).map { processor.fillTicket(id($0)) }, connection)
                }
                connection.unfinishedLookups = nil
                return false
            } catch {
                connection.unfinishedLookups = nil
                abandonPartlySentMGET(on: connection, "\(error)")
                return false
            }
            lookups.advance()
        }
        connection.unfinishedLookups = nil
        reply(ReplyEncoder.end, connection)
        return true
    }

    /// A store read failed for an MGET whose reply is partly sent: no error can replace it
    /// (PROTOCOL.md, Backpressure), so the connection closes after what was sent.
    func abandonPartlySentMGET(on connection: Connection, _ failure: String) {
        Log.warn("a store read failed in the middle of an MGET reply already partly sent; closing the connection",
                 ["error": failure])
        processor.counters.errors += 1
        connection.phase = .closing
    }

    func appendAbsent(_ userId: UnsafeRawBufferPointer, exists: Bool, _ connection: Connection) {
        if exists {
            reply(ReplyEncoder.no, connection)
        } else {
            processor.reserve(ReplyEncoder.notFoundLineCount(userId: userId), connection)
            processor.out.count += ReplyEncoder.writeNotFoundLine(userId: userId, to: processor.out.end)
        }
    }

    func appendValueLine(_ row: ProfileRow, _ connection: Connection) {
        reserveValueLine(row, connection)
        processor.out.count += ReplyEncoder.writeValueLine(userId: row.userId, name: row.name, portraitUri: row.portraitUri, to: processor.out.end)
    }

    /// Makes room for `row`'s VALUE line: by its bound, which reads no bytes, unless only the
    /// exact count fits the scratch at all.
    private func reserveValueLine(_ row: ProfileRow, _ connection: Connection) {
        let bound = ReplyEncoder.valueLineBound(userId: row.userId, name: row.name, portraitUri: row.portraitUri)
        processor.reserve(bound <= processor.out.capacity ? bound
                    : ReplyEncoder.valueLineCount(userId: row.userId, name: row.name, portraitUri: row.portraitUri),
                connection)
    }

    /// Appends one of ReplyEncoder's fixed replies (`ReplyEncoder.stored`).
    @inline(__always)
    func reply(_ fixed: StaticString, _ connection: Connection) {
        processor.reserve(fixed.utf8CodeUnitCount, connection)
        processor.out.count += ReplyEncoder.write(fixed, to: processor.out.end)
    }

    /// Appends `<keyword> <number>\n` (`COUNT 42`, `STORED 3`).
    func reply(_ keyword: StaticString, number: Int, _ connection: Connection) {
        let value = UInt64(clamping: number)
        processor.reserve(ReplyEncoder.numberLineCount(keyword, value), connection)
        processor.out.count += ReplyEncoder.writeNumberLine(keyword, value, to: processor.out.end)
    }

    func reply(error: ProtocolError, to connection: Connection) {
        processor.counters.errors += 1
        processor.reserve(error.replyCount, connection)
        processor.out.count += error.write(to: processor.out.end)
    }

    /// ERROR STORE with the reason, which names no file of the server; the log gets the whole error.
    func reply(storeError: any Error, to connection: Connection) {
        reply(storeFailure: processor.storeFailureReason(storeError), to: connection)
    }

    func reply(storeFailure reason: String, to connection: Connection) {
        processor.counters.errors += 1
        var line: [UInt8] = Array("ERROR STORE ".utf8)
        line.append(contentsOf: RequestProcessor.storeFailureText(reason))
        line.append(0x0A)
        processor.reserve(line.count, connection)
        line.withUnsafeBytes { processor.out.append($0) }
    }

    /// A multi-line reply whose store read failed halfway: replace it with ERROR STORE.
    ///
    /// Nothing is sent while a request is served, so all of the reply is still here: after the
    /// mark in the scratch, or, once it outgrew the scratch, at the end of the connection's queue.
    private func failStore(since mark: RequestProcessor.Mark, on connection: Connection, _ error: any Error) {
        processor.takeBack(since: mark, on: connection)
        reply(storeError: error, to: connection)
    }

    func writeStatistics(_ connection: Connection) {
        processor.context.workerStatistics[processor.index].publish(processor.counters)
        let snapshot = processor.context.snapshot()
        // The one value that is not a number, which only a node over a shared store gives
        // (docs/CLUSTER.md): a single node's STATS stays all numbers, as PROTOCOL.md promises.
        if snapshot.storeIsShared {
            let kind = snapshot.storeKind
            processor.reserve(ReplyEncoder.statLineCount(name: "store_kind", text: kind), connection)
            processor.out.count += ReplyEncoder.writeStatLine(name: "store_kind", text: kind, to: processor.out.end)
        }
        for (name, value) in snapshot.values {
            processor.reserve(ReplyEncoder.statLineCount(name: name, value: UInt64(clamping: value)), connection)
            processor.out.count += ReplyEncoder.writeStatLine(name: name, value: UInt64(clamping: value), to: processor.out.end)
        }
        reply(ReplyEncoder.end, connection)
    }

    /// Prefetches the cache entries of the ids the first complete lines of `bytes` look up
    /// (`RequestLines.idsAhead`), when there are two or more.
    func prefetchLookups(_ bytes: UnsafeRawPointer, _ count: Int) {
        var gathered = 0
        let slots = processor.lookahead
        RequestLines.idsAhead(bytes, count: count, limit: RequestProcessor.lookaheadSlots) { userId in
            slots[gathered] = PrefetchSlot(key: userId)
            gathered += 1
        }
        if gathered >= 2 {
            cache.prefetch(UnsafeMutableBufferPointer(rebasing: slots[0..<gathered]))
        }
    }

    /// GET or EXISTS: from the cache, else from the store this worker reads; when the fetchers
    /// read the store (`NeedsFetch`: the cache may not answer or misses, or reads of the
    /// connection are with them already), from them, to be answered in order.
    @inline(__always)
    private func lookUpOne(_ verb: Verb, _ userId: UnsafeRawBufferPointer, mustFetch: Bool, _ connection: Connection) {
        do {
            if mustFetch { throw NeedsFetch.miss }
            try lookUp(userId, exists: verb == .exists, on: connection)
        } catch let reason as NeedsFetch {
            fetch(verb, count: 1, reason, connection) { _ in userId }
        } catch {
            reply(storeError: error, to: connection)
        }
    }

    /// MGET as `lookUpOne` reads one id; once one id must be fetched, all of them are, and
    /// a store failure replaces the whole reply.
    private func lookUpMany(count: Int, mustFetch: Bool, _ connection: Connection, id: (Int) -> UnsafeRawBufferPointer) {
        let mark = RequestProcessor.Mark(processor, connection)
        let countersBefore = processor.counters
        do {
            if mustFetch { throw NeedsFetch.miss }
            try lookUpMGET(count: count, on: connection, since: mark, countersBefore: countersBefore, id: id)
        } catch let reason as NeedsFetch {
            processor.takeBack(since: mark, on: connection)
            processor.counters = countersBefore
            fetch(.mget, count: count, reason, connection, id: id)
        } catch {
            failStore(since: mark, on: connection, error)
        }
    }

    /// Hands every id of a GET, EXISTS or MGET to the fetchers, which answer and count them.
    private func fetch(_ verb: Verb, count: Int, _ reason: NeedsFetch, _ connection: Connection,
                       id: (Int) -> UnsafeRawBufferPointer) {
        if reason == .leaseExpired { processor.counters.leaseExpiredReads += 1 }
        processor.submitFetch(.lookups, answer: LineReadAnswer.lookups(verb), kind: verb.kind, arguments: count, argument: id,
                    lookups: Array(0..<count), keyPrefix: 0, tickets: (0..<count).map { processor.fillTicket(id($0)) }, connection)
    }
}


extension LineWorkerFront {
    func resume(_ connection: Connection) -> Bool { continueLookups(connection) }

    /// A line-protocol write's answer needs nothing before it.
    func beforeAnswer(of job: WriteJob, on connection: Connection) {}
}

/// The line protocol as the server registers it (docs/PROTOCOL.md): its listeners' refusal,
/// its one session, and each worker's `LineWorkerFront`.
///
/// Immutable; any thread may use it.
package final class LineProtocolFront: Front {
    /// `--max-line`: the longest request line.
    let maxLine: Int
    private let session: LineSession

    package init(maxLine: Int) {
        self.maxLine = maxLine
        session = LineSession(inputLimit: maxLine)
    }

    package var logFields: [(key: String, value: String)] { [] }

    package var busyReply: [UInt8] {
        var bytes: [UInt8] = []
        ProtocolError.busy.appendReply(to: &bytes)
        return bytes
    }

    package var changeFeed: (any ChangeFeed)? { nil }

    package func makeWorkerFront(for worker: Worker) -> any WorkerFront {
        LineWorkerFront(processor: worker.processor, maxLine: maxLine)
    }

    /// The one session every line-protocol connection shares: it keeps nothing.
    package func makeSession(id: Int) -> any FrontSession { session }

    package func bound(port: Int, tls: Bool) {}
}

/// The session of a line-protocol connection: it keeps nothing between requests, so one serves
/// every line-protocol connection, on whichever worker holds it at the time.
///
/// Immutable; used by the worker thread that holds the connection.
final class LineSession: FrontSession, @unchecked Sendable {
    /// `--max-line`: the longest request line, and so the input a connection holds at most.
    let inputLimit: Int

    init(inputLimit: Int) {
        self.inputLimit = inputLimit
    }

    var heldBytes: Int { 0 }

    func attached(_ connection: Connection, to worker: Worker) {}

    func leaving() {}

    func release() {}
}

/// How the line protocol answers a write: the reply its verb gives once committed.
enum LineWriteAnswer: WriteAnswer {
    /// SET: STORED.
    case stored
    /// MSET: STORED and the count of profiles.
    case storedCount(Int)
    /// UPDATE: UPDATED, or NOT_FOUND when there was no profile.
    case updated
    /// DEL: DELETED, or NOT_FOUND.
    case deleted
    /// FLUSHALL: OK.
    case flushed

    func write(_ job: WriteJob, through front: any WorkerFront) {
        let front = unsafeDowncast(front, to: LineWorkerFront.self)
        let connection = job.connection
        if let failure = job.failure { return front.reply(storeFailure: failure, to: connection) }
        switch self {
        case .stored: front.reply(ReplyEncoder.stored, connection)
        case .storedCount(let n): front.reply("STORED", number: n, connection)
        case .updated: replyIfFound(ReplyEncoder.updated, job, front)
        case .deleted: replyIfFound(ReplyEncoder.deleted, job, front)
        case .flushed: front.reply(ReplyEncoder.ok, connection)
        }
    }

    /// `found` when the profile existed before the write, else NOT_FOUND.
    private func replyIfFound(_ found: StaticString, _ job: WriteJob, _ front: LineWorkerFront) {
        if job.results[0].before.exists {
            front.reply(found, job.connection)
        } else {
            front.appendAbsent(job.argument(0), exists: false, job.connection)
        }
    }
}

/// How the line protocol answers a read the fetchers (or, for a listing, the worker) made.
enum LineReadAnswer: ReadAnswer {
    /// GET, EXISTS or MGET: a line per id, then END after an MGET's.
    case lookups(Verb)
    /// The ids an MGET had left once part of its reply was sent (`LineWorkerFront.continueLookups`): the
    /// rest of its reply, then END; a failure closes the connection, as no error can replace
    /// what was sent.
    case restOfMGET
    /// COUNT.
    case count
    /// RECENT or SCAN: a VALUE line per profile, then END.
    case rows

    func write(_ job: ReadJob, through front: any WorkerFront) {
        let front = unsafeDowncast(front, to: LineWorkerFront.self)
        let connection = job.connection
        if let failure = job.failure {
            if case .restOfMGET = self { return front.abandonPartlySentMGET(on: connection, failure) }
            return front.reply(storeFailure: failure, to: connection)
        }
        switch self {
        case .lookups(let verb):
            writeLookups(job, verb, front)
        case .restOfMGET:
            writeLookups(job, .mget, front)
        case .count:
            front.reply("COUNT", number: job.count, connection)
        case .rows:
            for index in 0..<job.rowCount { front.appendValueLine(job.row(index), connection) }
            front.reply(ReplyEncoder.end, connection)
        }
    }

    private func writeLookups(_ job: ReadJob, _ verb: Verb, _ front: LineWorkerFront) {
        let connection = job.connection
        for index in job.lookups.indices {
            let values = job.profile(index)
            if verb == .exists {
                front.reply(values == nil ? ReplyEncoder.no : ReplyEncoder.yes, connection)
            } else if let values {
                front.appendValueLine(ProfileRow(userId: job.userId(index), name: values.name, portraitUri: values.portraitUri),
                                       connection)
            } else {
                front.appendAbsent(job.userId(index), exists: false, connection)
            }
        }
        if verb == .mget { front.reply(ReplyEncoder.end, connection) }
    }
}

extension Verb {
    /// What the core counts the request as: the same word.
    var kind: RequestKind {
        switch self {
        case .ping: .ping
        case .get: .get
        case .mget: .mget
        case .set: .set
        case .mset: .mset
        case .update: .update
        case .del: .del
        case .exists: .exists
        case .count: .count
        case .recent: .recent
        case .scan: .scan
        case .stats: .stats
        case .auth: .auth
        case .flushall: .flushall
        case .quit: .quit
        }
    }

    /// Whether a shared store's fetchers answer it when the cache cannot.
    var isFetched: Bool {
        switch self {
        case .get, .mget, .exists, .count, .recent, .scan: true
        default: false
        }
    }
}

/// The line protocol's `CachedProfileEncoding`: a profile's VALUE line, encoded once for every
/// GET that hits it, with the raw values the RESP front answers with found in the line
/// wherever it carries them as they are (else the row's own bytes, which the cache copies).
///
/// Immutable; any thread may use it.
package struct LineCacheEncoding: CachedProfileEncoding {
    /// The longest VALUE line: every byte of the three values escaped, with quotes and spaces.
    static let valueLineCapacity = 6 + 3 * 3 + ValueEncoder.maxExpansion * (Limits.userId + Limits.name + Limits.portraitUri)

    package init() {}

    package var capacity: Int { Self.valueLineCapacity }

    package func encode(_ row: ProfileRow, at out: UnsafeMutableRawPointer) -> EncodedProfile {
        let layout = ReplyEncoder.writeValueLineLocatingValues(userId: row.userId, name: row.name,
                                                               portraitUri: row.portraitUri, to: out)
        func value(_ raw: UnsafeRawBufferPointer, at offset: Int?) -> UnsafeRawBufferPointer {
            guard let offset else { return raw }
            return UnsafeRawBufferPointer(start: out + offset, count: raw.count)
        }
        return EncodedProfile(reply: UnsafeRawBufferPointer(start: out, count: layout.count),
                              userIdInReply: layout.userId.map { UnsafeRawBufferPointer(start: out + $0, count: row.userId.count) },
                              name: value(row.name, at: layout.name),
                              portraitUri: value(row.portraitUri, at: layout.portraitUri))
    }
}

extension RequestCounters {
    /// What the lookups counted since `earlier`: the counters an MGET moved.
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
