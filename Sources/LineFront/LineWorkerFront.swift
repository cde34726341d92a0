import ProfileServer
import CLibevent
import Glibc
import ProfileCache
import ProfileModel
import ProfileProtocol
import ProfileStore
import WireBytes

/// The line protocol's front of one worker (docs/PROTOCOL.md): frames and decodes its
/// connections' request lines into what the core's request path serves, and encodes the
/// answers as the line protocol's replies.
///
/// Owned by its worker and used by that worker's thread only.
final class LineWorkerFront: WorkerFront {
    /// The worker's, a `let` so that the request path reaches it without reference counting.
    let processor: RequestProcessor
    let decoder = RequestDecoder()
    /// `--max-line`: the longest request line.
    let maxLine: Int
    /// Room in the scratch that any one GET or EXISTS reply fits in (the longest VALUE line,
    /// or ERROR STORE with its reason), so that answering one ahead never spills the scratch.
    /// A `let`, as a static's first-use check would run on every request.
    let heldReplyRoom = max(LineCacheEncoding.valueLineCapacity, "ERROR STORE \n".utf8.count + RequestProcessor.storeFailureReasonBytes)
    /// The reply to a line over `maxLine`.
    let tooLongReply: [UInt8]
    /// The request `decode` decoded last, until the next.
    private var request = LineRequest.failed(.tooLong)

    /// A decoded request line.
    private enum LineRequest {
        /// `GET <id>` in its plainest form, which needs neither the tokenizer nor the argument
        /// checks (`RequestLines.plainGetUserId`).
        case plainGet(UnsafeRawBufferPointer)
        /// A line the decoder took: its verb, and once its arguments are checked, its command.
        case verb(Verb)
        case command(Verb, Command)
        /// A line that gets this error.
        case failed(ProtocolError)
    }

    init(processor: RequestProcessor, maxLine: Int) {
        self.processor = processor
        self.maxLine = maxLine
        tooLongReply = Array("ERROR TOOLONG request line over \(maxLine) bytes, LF included (--max-line)\n".utf8)
    }

    func serve(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int {
        processor.serve(connection, bytes, count, front: self)
    }

    /// The line protocol keeps nothing of a connection between requests.
    func session(of connection: Connection) -> LineSession { unsafeDowncast(connection.session, to: LineSession.self) }

    /// A line-protocol write's answer needs nothing before it.
    func beforeAnswer(of job: WriteJob, on connection: Connection) {}

    // MARK: Decoding

    /// The ids the first complete lines of `bytes` look up (`RequestLines.idsAhead`).
    func beginServing(_ bytes: UnsafeRawPointer, _ count: Int, on connection: Connection, session: LineSession) -> Int {
        var gathered = 0
        let slots = processor.lookahead
        RequestLines.idsAhead(bytes, count: count, limit: RequestProcessor.lookaheadSlots) { userId in
            slots[gathered] = PrefetchSlot(key: userId)
            gathered += 1
        }
        return gathered
    }

    @inline(__always)
    func decode(_ input: UnsafeMutableRawBufferPointer, on connection: Connection, session: LineSession) -> DecodedInput {
        var frame = LineFramer.nextLine(in: UnsafeRawBufferPointer(input), maxLine: maxLine)
        if frame == .needMore && input.count >= maxLine && byteBeyondLineArrived(connection) { frame = .tooLong }
        switch frame {
        case .needMore:
            return .needMore
        case .tooLong:
            return .malformed
        case .line(let contentCount, let consumed):
            let line = UnsafeMutableRawBufferPointer(start: input.baseAddress, count: contentCount)
            if let userId = RequestLines.plainGetUserId(UnsafeRawBufferPointer(line)) {
                request = .plainGet(userId)
                return .request(consumed: consumed, requiredRole: Verb.get.requiredRole)
            }
            // Decoding unescapes quoted tokens in place; a line that may have to wait must
            // come back unchanged, so while jobs are in flight a quoted line waits undecoded.
            if connection.jobsInFlight > 0 && contentCount > 0 && memchr(line.baseAddress!, 0x22, contentCount) != nil {
                return .waits
            }
            switch decoder.decode(line) {
            case .empty:
                return .skipped(consumed)
            case .error(let error):
                request = .failed(error)
                return .request(consumed: consumed, requiredRole: .none)
            case .request(let verb):
                request = .verb(verb)
                return .request(consumed: consumed, requiredRole: verb.requiredRole)
            }
        }
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

    /// Decoding changed nothing of a line that waits (a quoted one waits undecoded).
    func putBack(on connection: Connection, session: LineSession) {}

    @inline(__always)
    func shape(on connection: Connection, session: LineSession) -> RequestShape {
        let verb: Verb
        switch request {
        case .plainGet:
            return .lookups(Lookups(kind: .get, count: 1, heldReplyRoom: heldReplyRoom))
        case .failed:
            return .immediate(counted: nil)
        case .command(let checked, _):
            verb = checked
        case .verb(let decoded):
            switch decoder.command() {
            case .failure(let error):
                request = .failed(error)
                return .immediate(counted: nil)
            case .success(let command):
                request = .command(decoded, command)
                verb = decoded
            }
        }
        switch verb {
        case .get, .exists: return .lookups(Lookups(kind: verb.kind, count: 1, heldReplyRoom: heldReplyRoom))
        case .mget:
            guard case .command(_, .mget(let count)) = request else { preconditionFailure("an MGET without its ids") }
            return .lookups(Lookups(kind: .mget, count: count, heldReplyRoom: 0, inParts: true))
        case .count, .recent, .scan: return .listing(verb.kind)
        case .set, .mset, .update, .del, .flushall: return .write
        case .ping, .stats, .auth, .quit: return .immediate(counted: verb.kind)
        }
    }


    // MARK: Answers

    /// `ERROR TOOLONG` naming the limit and the flag that sets it.
    func answerMalformed(on connection: Connection) {
        processor.counters.errors += 1
        processor.reserve(tooLongReply.count, connection)
        tooLongReply.withUnsafeBytes { processor.out.append($0) }
    }

    func answerDenied(on connection: Connection, session: LineSession) {
        reply(error: connection.role == .none ? .noAuth : .roleDenied, to: connection)
    }

    func execute(on connection: Connection, session: LineSession) {
        switch request {
        case .failed(let error):
            reply(error: error, to: connection)
        case .command(_, let command):
            execute(command, on: connection)
        case .plainGet, .verb:
            preconditionFailure("a lookup, or a line whose arguments were not checked")
        }
    }

    // Inlined into execute, its only caller, so the command is not copied to be passed on.
    @inline(__always)
    private func execute(_ command: Command, on connection: Connection) {
        switch command {
        case .ping:
            reply(ReplyEncoder.pong, connection)
        case .get, .exists, .mget:
            preconditionFailure("lookups are the core's")
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

    /// GET or EXISTS: a VALUE line, NOT_FOUND, YES or NO.
    @inline(__always)
    func answerLookup(_ index: Int, on connection: Connection, session: LineSession) throws {
        switch request {
        case .plainGet(let userId): try lookUp(userId, exists: false, on: connection)
        case .command(_, .get(let userId)): try lookUp(userId, exists: false, on: connection)
        case .command(_, .exists(let userId)): try lookUp(userId, exists: true, on: connection)
        default: preconditionFailure("not a lookup of one id")
        }
    }

    /// GET and EXISTS end with their one line.
    @inline(__always)
    func endLookups(on connection: Connection) {}

    /// An MGET's line for one id.
    func answerPart(of userId: UnsafeRawBufferPointer, on connection: Connection) throws {
        try lookUp(userId, exists: false, on: connection)
    }

    /// An MGET's END.
    func endParts(on connection: Connection) {
        reply(ReplyEncoder.end, connection)
    }

    func answerStoreFailure(_ reason: String, on connection: Connection) {
        reply(storeFailure: reason, to: connection)
    }

    /// A line's id through the core's lookup (`RequestProcessor.lookUpEncoding`): a VALUE line
    /// is the cache's own encoding, copied as it is, or encoded once where the reply goes when
    /// the store reads it.
    /// - Throws: the store's error; nothing was appended for this id then. `NeedsFetch` when
    ///   the fetchers must read it, having counted nothing.
    @inline(__always)
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

    // MARK: Lookups the fetchers make

    /// The ids are the line's arguments, as they are.
    func lookupUserId(_ index: Int) -> UnsafeRawBufferPointer? { argument(index) }

    var argumentCount: Int {
        switch request {
        case .command(_, .mget(let count)): count
        default: 1
        }
    }

    func argument(_ index: Int) -> UnsafeRawBufferPointer {
        switch request {
        case .plainGet(let userId): userId
        case .command(_, .get(let userId)), .command(_, .exists(let userId)): userId
        default: decoder.argument(index)
        }
    }

    func argumentIndex(ofLookup index: Int) -> Int { index }

    var keyPrefixCount: Int { 0 }

    func fetchAnswer(for kind: RequestKind, restOfParts: Bool) -> any ReadAnswer {
        if restOfParts { return LineReadAnswer.restOfMGET }
        return LineReadAnswer.lookups(kind == .exists ? .exists : kind == .mget ? .mget : .get)
    }

    // MARK: Replies

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

    /// ERROR STORE with the reason, which names no file of the server.
    func reply(storeFailure reason: String, to connection: Connection) {
        processor.counters.errors += 1
        var line: [UInt8] = Array("ERROR STORE ".utf8)
        line.append(contentsOf: RequestProcessor.storeFailureText(reason))
        line.append(0x0A)
        processor.reserve(line.count, connection)
        line.withUnsafeBytes { processor.out.append($0) }
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
    /// The ids an MGET had left once part of its reply was sent (`RequestProcessor.continueLookups`): the
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
            if case .restOfMGET = self { return front.processor.abandonPartlySentReply(on: connection, failure) }
            return front.reply(storeFailure: failure, to: connection)
        }
        switch self {
        case .lookups(let verb) where verb != .mget:
            writeLookup(job, 0, verb, front)
        case .count:
            front.reply("COUNT", number: job.count, connection)
        case .lookups, .restOfMGET, .rows:
            // A line per id or row, then END: the parts.
            break
        }
    }

    /// An MGET's lines, or RECENT's or SCAN's, and then END, made as the client reads.
    func partCount(of job: ReadJob) -> Int {
        guard job.failure == nil else { return 0 }
        switch self {
        case .lookups(.mget), .restOfMGET: return job.lookups.count + 1
        case .rows: return job.rowCount + 1
        case .lookups, .count: return 0
        }
    }

    func writePart(_ index: Int, of job: ReadJob, through front: any WorkerFront) {
        let front = unsafeDowncast(front, to: LineWorkerFront.self)
        let lines = if case .rows = self { job.rowCount } else { job.lookups.count }
        if index == lines { return front.reply(ReplyEncoder.end, job.connection) }
        if case .rows = self {
            front.appendValueLine(job.row(index), job.connection)
        } else {
            writeLookup(job, index, .mget, front)
        }
    }

    /// Lookup `index`'s line: its VALUE line, NOT_FOUND, or EXISTS's YES or NO.
    private func writeLookup(_ job: ReadJob, _ index: Int, _ verb: Verb, _ front: LineWorkerFront) {
        let connection = job.connection
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
