import ProfileServer
import Glibc
import ProfileCache
import ProfileModel
import ProfileStore
import RESPProtocol
import WireBytes

// The RESP front (docs/RESP.md): profiles as Redis hashes, on the same workers, cache, store,
// writer and roles as the line protocol. This file decodes RESP requests, checks each command
// and answers the ones that change nothing; RESPWrites.swift turns the others into write jobs
// and answers them once committed.

/// The RESP front of one worker: decodes its connections' requests, checks each command, and
/// answers them through the worker's request path, in RESP.
///
/// Owned by its worker and used by that worker's thread only.
final class RESPWorkerFront: WorkerFront {
    /// The worker's, a `let` so that the request path reaches it without reference counting.
    let processor: RequestProcessor
    /// What every worker's RESP front shares: the keyspace, SCAN's cursors, client tracking.
    let shared: RESPProtocolFront
    let decoder: RESPDecoder
    /// The context's, held here so that the request path reads it without reference counting.
    let keyspace: RESPKeyspace
    /// Read once: `allCases` makes its array at every use, and a static's first-use check
    /// would run on every key read.
    private let fieldsPerProfile = ProfileField.allCases.count
    /// Room for HGETALL's reply at its longest, or a store error (`heldReplyRoom(values:)`).
    private let hashReplyRoom: Int
    /// A key read's values, copied out of the cache or the store row (`readProfile`).
    private let fieldScratch: UnsafeMutableRawPointer
    /// The command of each request `readAhead` read, by its index there, so that serving it
    /// does not look its name up again (`RESPDecoder.aheadIndex`).
    private let aheadCommands: UnsafeMutablePointer<RESPCommandName?>
    /// The request `decode` decoded last, until the next: its command (when it has one), and
    /// what becomes of it. Kept as plain values, which a request sets without reference counting.
    private var command = RESPCommandName.ping
    private var outcome = RESPOutcome.serve
    /// Why it is refused, when `outcome` is `.rejected`.
    private var rejection = RESPProblem.fixed(RESPText.syntax)
    /// Where the decoder and CLIENT CACHING were before it, for `putBack`.
    private var resumeAt = RESPDecodeState()
    private var cachingGivenBefore = false
    /// What made the input unreadable (`DecodedInput.malformed`).
    private var malformed = RESPProtocolError.invalidMultibulkLength
    /// EXISTS's keys found so far.
    private var existsFound = 0

    /// What becomes of a decoded request.
    private enum RESPOutcome {
        /// A command this server does not have.
        case unknown
        /// A command with a count of arguments it never takes.
        case wrongArity
        /// A command refused for `rejection`; inside MULTI, a refusal that fails the transaction.
        case rejected(failsTransaction: Bool)
        /// A command to serve, the decoder's arguments its own.
        case serve
    }

    init(processor: RequestProcessor, shared: RESPProtocolFront) {
        self.processor = processor
        self.shared = shared
        decoder = RESPDecoder(limits: shared.limits)
        keyspace = shared.keyspace
        fieldScratch = .allocate(byteCount: ProfileLimits.name + ProfileLimits.portraitUri, alignment: 16)
        aheadCommands = .allocate(capacity: RequestProcessor.lookaheadSlots)
        hashReplyRoom = Self.heldReplyRoom(values: ProfileField.allCases.count)
    }

    deinit {
        fieldScratch.deallocate()
        aheadCommands.deallocate()
    }

    // MARK: Requests

    /// Reads ahead the first whole requests of `bytes` (`RESPDecoder.decodeAhead`), so that
    /// each is read and its command looked up once, and leaves in the processor's `lookahead`
    /// the ids of the keys they read (HGETALL, HGET and the other key reads); returns how many.
    /// `limit` 0 only forgets what an earlier pass read ahead.
    func readAhead(_ bytes: UnsafeRawPointer, _ count: Int, limit: Int, authenticated: Bool) -> Int {
        // At most as many as `aheadCommands` holds.
        let requests = decoder.decodeAhead(UnsafeRawBufferPointer(start: bytes, count: count),
                                           limit: min(limit, RequestProcessor.lookaheadSlots),
                                           authenticated: authenticated)
        var gathered = 0
        let slots = processor.lookahead
        for index in 0..<requests {
            let arguments = decoder.aheadArguments(index)
            let command = RESPCommandName.lookup(arguments[0])
            aheadCommands[index] = command
            if arguments.count >= 2, command?.readsKey == true,
               let userId = keyspace.possibleUserId(ofKey: arguments[1]) {
                slots[gathered] = PrefetchSlot(key: userId)
                gathered += 1
            }
        }
        return gathered
    }

    func serve(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int {
        processor.serve(connection, bytes, count, front: self)
    }

    func session(of connection: Connection) -> RESPSession { connection.resp }

    // MARK: Decoding

    /// The keys the first whole requests of `bytes` read (`readAhead`), unless a request is
    /// partly decoded already (the decoder goes on with it instead).
    func beginServing(_ bytes: UnsafeRawPointer, _ count: Int, on connection: Connection, session: RESPSession) -> Int {
        let fresh = session.decodeState == RESPDecodeState()
        return readAhead(bytes, count, limit: fresh ? RequestProcessor.lookaheadSlots : 0, authenticated: connection.role > .none)
    }

    /// Decodes a request and looks its command up: Redis's order checks an unknown command,
    /// then a wrong count, then (the core) authentication and role.
    @inline(__always)
    func decode(_ input: UnsafeMutableRawBufferPointer, on connection: Connection, session: RESPSession) -> DecodedInput {
        resumeAt = session.decodeState
        cachingGivenBefore = session.cachingGiven
        switch decoder.decode(UnsafeRawBufferPointer(input), state: &session.decodeState, authenticated: connection.role > .none) {
        case .needMore:
            return .needMore
        case .skipped(let consumed):
            return .skipped(consumed)
        case .error(let error):
            malformed = error
            return .malformed
        case .request(let consumed):
            let aheadIndex = decoder.aheadIndex
            guard let command = aheadIndex >= 0 ? aheadCommands[aheadIndex] : RESPCommandName.lookup(decoder.arguments[0]) else {
                outcome = .unknown
                return .request(consumed: consumed, requiredRole: .none)
            }
            self.command = command
            guard command.arityAllows(decoder.arguments.count) else {
                outcome = .wrongArity
                return .request(consumed: consumed, requiredRole: .none)
            }
            outcome = .serve
            return .request(consumed: consumed, requiredRole: command.requiredRole)
        }
    }

    /// The next pass decodes the request again from its start, as if it had not been seen.
    func putBack(on connection: Connection, session: RESPSession) {
        session.decodeState = resumeAt
        session.cachingGiven = cachingGivenBefore
    }

    /// What the decoded command is, after the checks that come after the role's: a subscribed
    /// RESP2 connection's, a transaction's (every command but EXEC is queued at once), and
    /// the keys' and arguments' (a request that gets an error is answered at once).
    @inline(__always)
    func shape(on connection: Connection, session: RESPSession) -> RequestShape {
        guard case .serve = outcome else { return .immediate(counted: nil) }
        let command = self.command
        let arguments = decoder.arguments
        if session.hasTrackingOrChannels {
            if !session.channels.isEmpty && session.version == .resp2 && !command.runsWhileSubscribed {
                rejection = RESPText.onlySubscriptionCommands(command, arguments)
                outcome = .rejected(failsTransaction: true)
                return .immediate(counted: nil)
            }
            if session.remembers != .none { rememberReads(command, arguments, session) }
        }
        if let transaction = session.transaction {
            if command == .exec { return transaction.failed ? .immediate(counted: nil) : .write }
            return .immediate(counted: command.isWrite ? nil : command.kind)
        }
        if command == .hgetall {
            // The commonest request, whose one argument needs no check.
            return .lookups(Lookups(kind: .get, count: 1, heldReplyRoom: hashReplyRoom))
        }
        switch command {
        case .multi, .discard:
            return .immediate(counted: command.kind)
        case .exec:
            return .immediate(counted: nil)
        case _ where command.isWrite:
            if let problem = keyspace.checkWrite(command, arguments) { return reject(problem) }
            return .write
        case _ where command.readsKey || command == .exists:
            if let problem = keyspace.checkRead(command, arguments) { return reject(problem) }
            existsFound = 0
            return .lookups(Lookups(kind: command.kind, count: command == .exists ? arguments.count - 1 : 1,
                                    heldReplyRoom: respHeldReplyRoom(command, arguments.count)))
        case .dbsize:
            return .listing(command.kind)
        case .scan:
            switch scanOptions(arguments) {
            case .failure(let problem): return reject(problem)
            // No key of another type exists: that scan is over at once.
            case .success(let options) where options.limit == 0: return .immediate(counted: command.kind)
            case .success: return .listing(command.kind)
            }
        default:
            return .immediate(counted: command.kind)
        }
    }

    /// A request outside a transaction that gets `problem`.
    private func reject(_ problem: RESPProblem) -> RequestShape {
        rejection = problem
        outcome = .rejected(failsTransaction: false)
        return .immediate(counted: nil)
    }

    /// Room in the scratch that the reply of a key read with `argumentCount` arguments fits in
    /// (every value it may name at its longest, or a store error), so that answering it ahead
    /// never spills the scratch.
    private func respHeldReplyRoom(_ command: RESPCommandName, _ argumentCount: Int) -> Int {
        switch command {
        case .exists: Self.heldReplyRoom(values: 0)
        case .hmget: Self.heldReplyRoom(values: argumentCount - 2)
        default: Self.heldReplyRoom(values: fieldsPerProfile)
        }
    }

    /// Room for a reply naming `values` values at their longest, or a store error.
    private static func heldReplyRoom(values: Int) -> Int {
        64 + max(RequestProcessor.storeFailureReasonBytes, values * (ProfileLimits.portraitUri + 32))
    }

    // MARK: Answers

    func answerMalformed(on connection: Connection) {
        processor.counters.errors += 1
        processor.reserve(malformed.replyCount, connection)
        processor.out.count += malformed.write(to: processor.out.end)
    }

    /// Inside MULTI, a command refused fails the transaction, as in Redis.
    func answerDenied(on connection: Connection, session: RESPSession) {
        session.transaction?.fail()
        respError(connection.role == .none ? .fixed(RESPText.noAuth) : command.noPermission, connection)
    }

    func execute(on connection: Connection, session: RESPSession) {
        let arguments = decoder.arguments
        switch outcome {
        case .unknown:
            session.transaction?.fail()
            processor.counters.errors += 1
            processor.reserve(RESPEncoder.unknownCommandCount(arguments), connection)
            processor.out.count += RESPEncoder.writeUnknownCommand(arguments, to: processor.out.end)
        case .wrongArity:
            session.transaction?.fail()
            processor.counters.errors += 1
            processor.reserve(RESPEncoder.wrongNumberOfArgumentsCount(command), connection)
            processor.out.count += RESPEncoder.writeWrongNumberOfArguments(command, to: processor.out.end)
        case .rejected(let failsTransaction):
            if failsTransaction { session.transaction?.fail() }
            respError(rejection, connection)
        case .serve:
            if let transaction = session.transaction { return serveInTransaction(command, arguments, transaction, connection) }
            switch command {
            case .multi:
                session.transaction = RESPTransaction()
                respSimple("OK", connection)
            case .exec:
                respError(.fixed(RESPText.execWithoutMulti), connection)
            case .discard:
                respError(.fixed(RESPText.discardWithoutMulti), connection)
            case _ where command.isWrite:
                submitRESPWrite(command, arguments, connection)
            default:
                executeRESP(command, arguments, connection)
            }
        }
    }

    /// Between MULTI and EXEC: EXEC, DISCARD, MULTI, WATCH and QUIT act at once; every other
    /// command is checked and queued.
    private func serveInTransaction(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                                    _ transaction: RESPTransaction, _ connection: Connection) {
        let session = connection.resp
        switch command {
        case .exec:
            session.transaction = nil
            if transaction.failed {
                respError(.fixed(RESPText.execAbort), connection)
            } else {
                submitRESPTransaction(transaction, connection)
            }
        case .discard:
            session.transaction = nil
            respSimple("OK", connection)
        case .multi:
            respError(.fixed(RESPText.nestedMulti), connection)
        case .watch:
            respError(.fixed(RESPText.watchInMulti), connection)
        case .subscribe, .unsubscribe:
            transaction.fail()
            respError(.fixed(RESPText.subscribeInTransaction), connection)
        case .quit:
            session.transaction = nil
            respSimple("OK", connection)
            connection.phase = .closing
        default:
            var problem = command.isWrite ? keyspace.checkWrite(command, arguments) : keyspace.checkRead(command, arguments)
            // EXEC answers at once: only a store this loop reads can answer a SCAN then.
            if command == .scan && !processor.reads.readsAtOnce {
                problem = .fixed(RESPText.scanInSharedTransaction)
            }
            if let problem {
                transaction.fail()
                respError(problem, connection)
            } else if transaction.failed {
                // As Redis: answered QUEUED, and EXEC answers EXECABORT; nothing is kept.
                respSimple("QUEUED", connection)
            } else if transaction.commands.count >= RESPTransaction.maxCommands {
                transaction.fail()
                respError(.fixed(RESPText.transactionFull), connection)
            } else {
                let cost = RESPTransaction.cost(of: arguments)
                // A store failure's reply is the largest error.
                let replyBound = max(keyspace.replyBound(command, arguments), 64 + RequestProcessor.storeFailureReasonBytes)
                if transaction.bytes + cost > RESPTransaction.maxBytes {
                    transaction.fail()
                    respError(.fixed(RESPText.transactionTooLarge), connection)
                } else if transaction.replyBytes + replyBound > RESPTransaction.maxReplyBytes {
                    transaction.fail()
                    respError(.fixed(RESPText.transactionRepliesTooLarge), connection)
                } else {
                    transaction.queue(command, arguments, cost: cost, replyBound: replyBound)
                    respSimple("QUEUED", connection)
                }
            }
        }
    }

    // MARK: Key reads

    /// A key read's reply, or EXISTS's count of the keys found so far.
    @inline(__always)
    func answerLookup(_ index: Int, on connection: Connection, session: RESPSession) throws {
        let arguments = decoder.arguments
        switch command {
        case .hgetall:
            // Room first, so the reply is written from the cached entry itself, under its
            // shard's lock.
            processor.reserve(hashReplyRoom, connection)
            let version = session.version
            let end = processor.out.end
            processor.out.count += try withProfile(arguments[1]) { RESPEncoder.writeProfileHash($0, version, to: end) }
        case .exists:
            if try withProfile(arguments[index + 1], { $0 != nil }) { existsFound += 1 }
        default:
            writeKeyRead(command, arguments, try readProfile(arguments[1]), connection)
        }
    }

    /// EXISTS answers its count once every key is looked up; a key read has answered.
    @inline(__always)
    func endLookups(on connection: Connection) {
        if command == .exists { respInteger(existsFound, connection) }
    }

    func answerStoreFailure(_ reason: String, on connection: Connection) {
        respStoreFailure(reason, connection)
    }

    // MARK: Key reads the fetchers make

    func lookupUserId(_ index: Int) -> UnsafeRawBufferPointer? {
        keyspace.userId(ofKey: decoder.arguments[argumentIndex(ofLookup: index)])
    }

    var argumentCount: Int { decoder.arguments.count }

    func argument(_ index: Int) -> UnsafeRawBufferPointer { decoder.arguments[index] }

    /// EXISTS reads each of its keys; a key read, its first argument.
    func argumentIndex(ofLookup index: Int) -> Int {
        if command == .exists { return index + 1 }
        return 1
    }

    var keyPrefixCount: Int { processor.context.configuration.respKeyPrefix.count }

    func fetchAnswer(for kind: RequestKind, restOfParts: Bool) -> any ReadAnswer {
        RESPReadAnswer.command(command)
    }

    // MARK: Commands that change nothing

    /// Runs a command that goes to no writer and reads no key: at once, or at its turn in an
    /// EXEC's answer (`inTransaction`), where it cannot wait for a fetch; DBSIZE then counts
    /// what the store's writes left (SCAN is not queued over a shared store).
    func executeRESP(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                     _ connection: Connection, inTransaction: Bool = false) {
        switch command {
        case .ping:
            // Redis's table allows any count; PING itself refuses more than a message, also at
            // its turn in an EXEC.
            if arguments.count > 2 {
                processor.counters.errors += 1
                processor.reserve(RESPEncoder.wrongNumberOfArgumentsCount(.ping), connection)
                processor.out.count += RESPEncoder.writeWrongNumberOfArguments(.ping, to: processor.out.end)
            } else if !connection.resp.channels.isEmpty && connection.resp.version == .resp2 {
                respRaw(RESPPush.subscribedPong(arguments.count == 2 ? arguments[1] : nil), connection)
            } else if arguments.count == 1 {
                respSimple("PONG", connection)
            } else {
                respBulk(arguments[1], connection)
            }
        case .echo:
            respBulk(arguments[1], connection)
        case .hello:
            hello(arguments, connection)
        case .auth:
            if arguments.count > 3 { return respError(.fixed(RESPText.syntax), connection) }
            if processor.authenticate(arguments[arguments.count - 1], on: connection) {
                respSimple("OK", connection)
            } else {
                respError(.fixed(RESPText.wrongPass), connection)
            }
        case .select:
            guard let index = RESPArgument.integer(arguments[1]) else { return respError(.fixed(RESPText.notInteger), connection) }
            if index == 0 { respSimple("OK", connection) } else { respError(.fixed(RESPText.dbIndex), connection) }
        case .quit:
            respSimple("OK", connection)
            connection.phase = .closing
        case .client:
            client(arguments, connection)
        case .info:
            info(arguments, connection)
        case .dbsize:
            if inTransaction {
                // Inside EXEC nothing waits for a fetch: what the store's writes left.
                respInteger(processor.context.writePath.rowCount, connection)
            } else {
                processor.readListing(.count, answer: RESPReadAnswer.dbsize, kind: command.kind, arguments: 0,
                            argument: { _ in fatalError("DBSIZE has no arguments") }, connection)
            }
        case .command:
            if arguments.count == 1 {
                respArrayHeader(0, connection)
            } else if arguments.count == 2 && RESPKeyword.matches(arguments[1], "COUNT") {
                respInteger(RESPCommandName.allCases.count, connection)
            } else {
                unknownSubcommand(arguments, connection)
            }
        case .config:
            config(arguments, connection)
        case .scan:
            scan(arguments, connection)
        case .watch:
            respError(.fixed(RESPText.watchUnsupported), connection)
        case .subscribe:
            subscribe(arguments, connection)
        case .unsubscribe:
            unsubscribe(arguments, connection)
        case .unwatch:
            respSimple("OK", connection)
        default:
            // Writes, key reads and transaction commands never get here.
            preconditionFailure("\(command) is not run by executeRESP")
        }
    }

    /// A key's profile, from the cache, else the store (which then fills the cache); nil when
    /// the key names no profile. The values are copied to the worker's field scratch, valid
    /// until the next read.
    /// - Throws: the store's error.
    func readProfile(_ key: UnsafeRawBufferPointer) throws -> ProfileValues? {
        let scratch = fieldScratch
        return try withProfile(key) { values in values.map { Self.copy($0.name, $0.portraitUri, to: scratch) } }
    }

    /// Hands a key's profile to `use` (nil when the key names none) through the core's lookup
    /// (`RequestProcessor.withProfile`): on a cache hit, views of the cached entry, under its
    /// shard's lock, so `use` must only write into room already reserved. A key without the
    /// prefix counts as a lookup that missed; one whose id no profile may have reaches the
    /// cache, which holds only ids, but not the store.
    /// - Throws: the store's error, or `NeedsFetch`, having counted nothing; `use` has not run
    ///   then.
    func withProfile<R>(_ key: UnsafeRawBufferPointer, _ use: (ProfileValues?) -> R) throws -> R {
        guard let userId = keyspace.possibleUserId(ofKey: key) else {
            processor.counters.getLookups += 1
            processor.counters.getMisses += 1
            return use(nil)
        }
        return try processor.withProfile(userId, mayBeStored: { RESPKeyspace.isUserId($0) }, use)
    }

    private static func copy(_ name: UnsafeRawBufferPointer, _ portraitUri: UnsafeRawBufferPointer,
                             to scratch: UnsafeMutableRawPointer) -> ProfileValues {
        if name.count > 0 { scratch.copyMemory(from: name.baseAddress!, byteCount: name.count) }
        if portraitUri.count > 0 { (scratch + name.count).copyMemory(from: portraitUri.baseAddress!, byteCount: portraitUri.count) }
        return ProfileValues(name: UnsafeRawBufferPointer(start: scratch, count: name.count),
                          portraitUri: UnsafeRawBufferPointer(start: scratch + name.count, count: portraitUri.count))
    }

    /// The reply of a command that reads one key's profile, from its values (nil: no profile).
    func writeKeyRead(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                      _ values: ProfileValues?, _ connection: Connection) {
        switch command {
        case .hget:
            respField(values, ProfileField(arguments[2])!, connection)
        case .hmget:
            respArrayHeader(arguments.count - 2, connection)
            for field in arguments.dropFirst(2) { respField(values, ProfileField(field)!, connection) }
        case .hgetall:
            let version = connection.resp.version
            processor.reserve(RESPEncoder.profileHashCount(values, version), connection)
            processor.out.count += RESPEncoder.writeProfileHash(values, version, to: processor.out.end)
        case .hkeys, .hvals:
            respArrayHeader(values?.fieldCount ?? 0, connection)
            for field in ProfileField.allCases where values?.has(field) == true {
                if command == .hkeys { respBulk(field.label, connection) } else { respBulk(values![field], connection) }
            }
        case .hlen:
            respInteger(values?.fieldCount ?? 0, connection)
        case .hexists:
            respInteger(values?.has(ProfileField(arguments[2])!) == true ? 1 : 0, connection)
        case .hstrlen:
            respInteger(values?[ProfileField(arguments[2])!].count ?? 0, connection)
        case .type:
            respSimple(values == nil ? "none" : "hash", connection)
        case .ttl, .pttl:
            respInteger(values == nil ? -2 : -1, connection)
        default:
            preconditionFailure("\(command) reads no key")
        }
    }

    private func respField(_ values: ProfileValues?, _ field: ProfileField, _ connection: Connection) {
        if let values, values.has(field) { respBulk(values[field], connection) } else { respNull(connection) }
    }

    // MARK: Connection commands

    /// `HELLO`: the codec reads it (`RESPHello`); authentication and the name are the server's.
    private func hello(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let session = connection.resp
        let hello: RESPHello
        switch RESPHello.parse(arguments) {
        case .success(let parsed): hello = parsed
        case .failure(let problem): return respError(problem, connection)
        }
        if let token = hello.token, !processor.authenticate(token, on: connection) { return respError(.fixed(RESPText.wrongPass), connection) }
        if let name = hello.name {
            guard RESPArgument.isClientName(name) else { return respError(.fixed(RESPText.clientName), connection) }
            session.name = name.count > 0 ? Array(name) : nil
        }
        if let version = hello.version {
            session.version = version
            shared.tracking.setVersion(session.tracking, version)
        }
        let version = session.version
        respMapHeader(8, connection)
        // "redis" and the Redis version whose commands profiled implements: client libraries
        // (redis-py's client cache) decide what they may use from these two.
        respBulk("server", connection); respBulk("redis", connection)
        respBulk("version", connection); respBulk(respCompatibleRedisVersion, connection)
        respBulk("profiled_version", connection)
        Array(profiledVersion.utf8).withUnsafeBytes { respBulk($0, connection) }
        respBulk("proto", connection); respInteger(version == .resp3 ? 3 : 2, connection)
        respBulk("id", connection); respInteger(session.id, connection)
        respBulk("mode", connection); respBulk("standalone", connection)
        respBulk("role", connection); respBulk("master", connection)
        respBulk("modules", connection); respArrayHeader(0, connection)
    }

    private func client(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let session = connection.resp
        let sub = arguments[1]
        func wrongCount(_ subcommand: StaticString) {
            processor.counters.errors += 1
            processor.reserve(RESPEncoder.wrongNumberOfArgumentsCount(.client, subcommand: subcommand), connection)
            processor.out.count += RESPEncoder.writeWrongNumberOfArguments(.client, subcommand: subcommand, to: processor.out.end)
        }
        if RESPKeyword.matches(sub, "SETNAME") {
            guard arguments.count == 3 else { return wrongCount("setname") }
            guard RESPArgument.isClientName(arguments[2]) else { return respError(.fixed(RESPText.clientName), connection) }
            session.name = arguments[2].count > 0 ? Array(arguments[2]) : nil
            respSimple("OK", connection)
        } else if RESPKeyword.matches(sub, "GETNAME") {
            guard arguments.count == 2 else { return wrongCount("getname") }
            if let name = session.name { name.withUnsafeBytes { respBulk($0, connection) } } else { respNull(connection) }
        } else if RESPKeyword.matches(sub, "ID") {
            guard arguments.count == 2 else { return wrongCount("id") }
            respInteger(session.id, connection)
        } else if RESPKeyword.matches(sub, "TRACKING") {
            guard arguments.count >= 3 else { return wrongCount("tracking") }
            clientTracking(arguments, connection)
        } else if RESPKeyword.matches(sub, "CACHING") {
            guard arguments.count == 3 else { return wrongCount("caching") }
            clientCaching(arguments[2], connection)
        } else if RESPKeyword.matches(sub, "TRACKINGINFO") {
            guard arguments.count == 2 else { return wrongCount("trackinginfo") }
            trackingInfo(connection)
        } else if RESPKeyword.matches(sub, "GETREDIR") {
            guard arguments.count == 2 else { return wrongCount("getredir") }
            let state = shared.tracking.state(of: session.tracking)
            respInteger(state.on ? state.redirect : -1, connection)
        } else if RESPKeyword.matches(sub, "SETINFO") {
            guard arguments.count == 4 else { return wrongCount("setinfo") }
            guard RESPKeyword.matches(arguments[2], "LIB-NAME") || RESPKeyword.matches(arguments[2], "LIB-VER") else {
                return respError(.text([textBytes("ERR Unrecognized option '"), arguments[2], textBytes("'")]), connection)
            }
            respSimple("OK", connection)
        } else {
            unknownSubcommand(arguments, connection)
        }
    }

    // MARK: Client-side caching

    /// Remembers the keys this command reads for the connection's CLIENT TRACKING, before
    /// they are read, as its OPTIN or OPTOUT mode and `CLIENT CACHING` say; an EXEC's, those its
    /// queued key reads name. `CLIENT CACHING` applies to the next command (inside MULTI, to
    /// the transaction), as in Redis: any other command but CLIENT uses it up.
    private func rememberReads(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                               _ session: RESPSession) {
        let remembered = switch session.remembers {
        case .none: false
        case .all: true
        case .optin: session.cachingGiven
        case .optout: !session.cachingGiven
        }
        if command != .client && (session.transaction == nil || command == .exec) { session.cachingGiven = false }
        guard remembered else { return }
        var userIds: [[UInt8]] = []
        if let transaction = session.transaction {
            guard command == .exec, !transaction.failed else { return }
            for queued in transaction.commands where queued.command.readsKey || queued.command == .exists {
                let keys = queued.command == .exists ? queued.count - 1 : 1
                for index in queued.first + 1..<queued.first + 1 + keys {
                    transaction.arguments[index].withUnsafeBytes { key in
                        if let userId = keyspace.userId(ofKey: key) { userIds.append(Array(userId)) }
                    }
                }
            }
        } else {
            guard command.readsKey || command == .exists else { return }
            let keys = command == .exists ? arguments.count - 1 : 1
            for index in 1...keys {
                if let userId = keyspace.userId(ofKey: arguments[index]) { userIds.append(Array(userId)) }
            }
        }
        if !userIds.isEmpty { shared.tracking.remember(userIds, for: session.tracking) }
    }

    /// `CLIENT TRACKING ON|OFF ...`, checked by the codec (`RESPTrackingRequest`) against what
    /// the connection has on.
    private func clientTracking(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let session = connection.resp
        let tracking = shared.tracking
        let state = tracking.state(of: session.tracking)
        let current = RESPTrackingRequest.Current(on: state.on, bcast: state.bcast, optin: session.remembers == .optin,
                                                  optout: session.remembers == .optout, prefixes: state.prefixes)
        switch RESPTrackingRequest.parse(arguments, current: current, clientExists: { tracking.clientExists($0) }) {
        case .failure(let problem):
            respError(problem, connection)
        case .success(let request) where request.on:
            tracking.turnOn(session.tracking, request, outlet: connection.makePushOutlet())
            session.remembers = request.bcast ? .none : request.optin ? .optin : request.optout ? .optout : .all
            session.prefixBytes = tracking.state(of: session.tracking).prefixes.reduce(0) { $0 + $1.count + 48 }
            respSimple("OK", connection)
        case .success:
            tracking.turnOff(session.tracking)
            session.remembers = .none
            session.cachingGiven = false
            session.prefixBytes = 0
            respSimple("OK", connection)
        }
    }

    /// `CLIENT CACHING yes|no`, in OPTIN or OPTOUT mode respectively.
    private func clientCaching(_ option: UnsafeRawBufferPointer, _ connection: Connection) {
        let session = connection.resp
        guard shared.tracking.state(of: session.tracking).on else {
            return respError(.fixed(RESPText.cachingNeedsTracking), connection)
        }
        if RESPKeyword.matches(option, "YES") {
            guard session.remembers == .optin else { return respError(.fixed(RESPText.cachingYesNeedsOptin), connection) }
        } else if RESPKeyword.matches(option, "NO") {
            guard session.remembers == .optout else { return respError(.fixed(RESPText.cachingNoNeedsOptout), connection) }
        } else {
            return respError(.fixed(RESPText.syntax), connection)
        }
        session.cachingGiven = true
        respSimple("OK", connection)
    }

    /// `CLIENT TRACKINGINFO`: Redis's map of `flags` (a set), `redirect` and `prefixes`.
    private func trackingInfo(_ connection: Connection) {
        let session = connection.resp
        let state = shared.tracking.state(of: session.tracking)
        var flags: [StaticString] = [state.on ? "on" : "off"]
        if state.bcast { flags.append("bcast") }
        if session.remembers == .optin {
            flags.append("optin")
            if session.cachingGiven { flags.append("caching-yes") }
        }
        if session.remembers == .optout {
            flags.append("optout")
            if session.cachingGiven { flags.append("caching-no") }
        }
        if state.noloop { flags.append("noloop") }
        if state.brokenRedirect { flags.append("broken_redirect") }
        respMapHeader(3, connection)
        respBulk("flags", connection)
        respRaw(Array("\(session.version == .resp3 ? "~" : "*")\(flags.count)\r\n".utf8), connection)
        for flag in flags { respBulk(flag, connection) }
        respBulk("redirect", connection)
        respInteger(state.on ? state.redirect : -1, connection)
        respBulk("prefixes", connection)
        respArrayHeader(state.prefixes.count, connection)
        for prefix in state.prefixes { prefix.withUnsafeBytes { respBulk($0, connection) } }
    }

    /// `SUBSCRIBE channel ...`: any channel may be named; only `__redis__:invalidate` carries
    /// anything, the invalidations of the clients that redirect theirs here.
    private func subscribe(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let session = connection.resp
        for channel in arguments.dropFirst() {
            if !session.channels.contains(where: { $0.elementsEqual(channel) }) {
                session.channels.append(Array(channel))
                if Self.isInvalidationChannel(channel) { shared.tracking.setSubscribed(session.tracking, true, outlet: connection.makePushOutlet()) }
            }
            respRaw(RESPPush.subscription("subscribe", channel: channel, count: session.channels.count, session.version), connection)
        }
    }

    /// `UNSUBSCRIBE [channel ...]`: the channels named, or all of them.
    private func unsubscribe(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let session = connection.resp
        let named: [[UInt8]] = arguments.count > 1 ? arguments.dropFirst().map { Array($0) } : session.channels
        if named.isEmpty {
            respRaw(RESPPush.subscription("unsubscribe", channel: nil, count: 0, session.version), connection)
        }
        for channel in named {
            session.channels.removeAll { $0 == channel }
            channel.withUnsafeBytes { bytes in
                if Self.isInvalidationChannel(bytes) { shared.tracking.setSubscribed(session.tracking, false, outlet: nil) }
                respRaw(RESPPush.subscription("unsubscribe", channel: bytes, count: session.channels.count, session.version), connection)
            }
        }
    }

    private static func isInvalidationChannel(_ channel: UnsafeRawBufferPointer) -> Bool {
        channel.elementsEqual(UnsafeRawBufferPointer(start: respInvalidationChannel.utf8Start,
                                                     count: respInvalidationChannel.utf8CodeUnitCount))
    }

    func respRaw(_ bytes: [UInt8], _ connection: Connection) {
        processor.reserve(bytes.count, connection)
        bytes.withUnsafeBytes { processor.out.end.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        processor.out.count += bytes.count
    }

    private func unknownSubcommand(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        processor.counters.errors += 1
        processor.reserve(RESPEncoder.unknownSubcommandCount(arguments), connection)
        processor.out.count += RESPEncoder.writeUnknownSubcommand(arguments, to: processor.out.end)
    }

    /// `CONFIG GET pattern [pattern ...]`: `save`, `appendonly` and `maxmemory`, as redis-benchmark
    /// and other tools ask for them at start.
    private func config(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        guard RESPKeyword.matches(arguments[1], "GET") else { return unknownSubcommand(arguments, connection) }
        guard arguments.count >= 3 else {
            processor.counters.errors += 1
            processor.reserve(RESPEncoder.wrongNumberOfArgumentsCount(.config, subcommand: "get"), connection)
            processor.out.count += RESPEncoder.writeWrongNumberOfArguments(.config, subcommand: "get", to: processor.out.end)
            return
        }
        let maxmemory = Array(String(processor.context.cache.statistics.limitBytes).utf8)
        let parameters: [(StaticString, [UInt8])] = [("save", []), ("appendonly", Array("no".utf8)), ("maxmemory", maxmemory)]
        var matched: [(StaticString, [UInt8])] = []
        for (name, value) in parameters {
            let nameBytes = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
            if arguments.dropFirst(2).contains(where: { globMatches($0, nameBytes, ignoringCase: true) }) {
                matched.append((name, value))
            }
        }
        respMapHeader(matched.count, connection)
        for (name, value) in matched {
            respBulk(name, connection)
            value.withUnsafeBytes { respBulk($0, connection) }
        }
    }

    /// `INFO [section ...]`: the server's counts, laid out by the codec (`RESPServerFacts`).
    private func info(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let snapshot = processor.context.snapshot().values
        func stat(_ name: StaticString) -> Int {
            snapshot.first { $0.name.utf8CodeUnitCount == name.utf8CodeUnitCount
                && memcmp($0.name.utf8Start, name.utf8Start, name.utf8CodeUnitCount) == 0 }?.value ?? 0
        }
        let facts = RESPServerFacts(profiledVersion: profiledVersion, port: shared.port, uptimeSeconds: stat("uptime_seconds"),
                                    connectedClients: stat("curr_connections"),
                                    usedMemory: stat("cache_bytes") + stat("write_buffer_bytes"), maxMemory: stat("cache_limit_bytes"),
                                    commandsProcessed: processor.context.commandsProcessed, keyspaceHits: stat("get_hits"),
                                    keyspaceMisses: stat("get_misses"), evictedKeys: stat("cache_evictions"), keys: stat("store_rows"))
        facts.infoText(arguments).withUnsafeBytes { respBulk($0, connection) }
    }

    // MARK: SCAN

    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`: profiles in userId order, `n` (10
    /// by default, at most 1,000) looked at per call. The cursor names the last key looked at,
    /// so a key present for the whole scan is returned exactly once.
    func scan(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ connection: Connection) {
        let options: ScanOptions
        switch scanOptions(arguments) {
        case .success(let parsed): options = parsed
        case .failure(let problem): return respError(problem, connection)
        }
        if options.limit == 0 { return writeScanReply(arguments, userIds: [], limit: 0, connection) }
        processor.readListing(.scan(after: options.after, limit: options.limit), answer: RESPReadAnswer.scan(limit: options.limit),
                    kind: .scan, arguments: arguments.count,
                    argument: { arguments[$0] }, connection)
    }

    /// What a SCAN asks for: where to go on after, and how many profiles to look at (0: none,
    /// for a type no key has).
    struct ScanOptions {
        var after: [UInt8]
        var limit: Int
    }

    func scanOptions(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Result<ScanOptions, RESPProblem> {
        var limit = 10
        var onlyOtherType = false
        var index = 2
        while index < arguments.count {
            let option = arguments[index]
            guard index + 1 < arguments.count else { return .failure(.fixed(RESPText.syntax)) }
            if RESPKeyword.matches(option, "MATCH") {
                // Read when answering.
            } else if RESPKeyword.matches(option, "COUNT") {
                guard let n = RESPArgument.integer(arguments[index + 1]) else { return .failure(.fixed(RESPText.notInteger)) }
                guard n >= 1 else { return .failure(.fixed(RESPText.syntax)) }
                limit = min(n, ProfileLimits.rowsPerListing)
            } else if RESPKeyword.matches(option, "TYPE") {
                onlyOtherType = !RESPKeyword.matches(arguments[index + 1], "hash")
            } else {
                return .failure(.fixed(RESPText.syntax))
            }
            index += 2
        }
        let cursorBytes = arguments[1]
        var after: [UInt8] = []
        if !(cursorBytes.count == 1 && cursorBytes[0] == UInt8(ascii: "0")) {
            guard let cursor = UInt64(String(decoding: cursorBytes, as: UTF8.self)),
                  let last = shared.scanCursors.userId(after: cursor) else {
                return .failure(.fixed(RESPText.invalidCursor))
            }
            after = last
        }
        // No key of another type exists: that scan is over at once.
        return .success(ScanOptions(after: after, limit: onlyOtherType ? 0 : limit))
    }

    /// SCAN's reply from the userIds the store gave (`limit` were asked for): the next cursor,
    /// `0` when they were fewer, and the keys that match the request's MATCH.
    func writeScanReply(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, userIds: [[UInt8]], limit: Int,
                        _ connection: Connection) {
        var pattern: UnsafeRawBufferPointer? = nil
        var index = 2
        while index + 1 < arguments.count {
            if RESPKeyword.matches(arguments[index], "MATCH") { pattern = arguments[index + 1] }
            index += 2
        }
        let prefix = processor.context.configuration.respKeyPrefix
        let keys = userIds.map { prefix + $0 }.filter { key in
            key.withUnsafeBytes { keyBytes in pattern.map { globMatches($0, keyBytes, ignoringCase: false) } ?? true }
        }
        respArrayHeader(2, connection)
        if userIds.count < limit || limit == 0 {
            respBulk("0", connection)
        } else {
            let next = userIds.last!.withUnsafeBytes { shared.scanCursors.cursor(after: $0) }
            Array(String(next).utf8).withUnsafeBytes { respBulk($0, connection) }
        }
        respArrayHeader(keys.count, connection)
        for key in keys { key.withUnsafeBytes { respBulk($0, connection) } }
    }

    // MARK: Replies

    func respSimple(_ text: StaticString, _ connection: Connection) {
        processor.reserve(RESPEncoder.simpleStringCount(text), connection)
        processor.out.count += RESPEncoder.writeSimpleString(text, to: processor.out.end)
    }

    func respError(_ problem: RESPProblem, _ connection: Connection) {
        processor.counters.errors += 1
        switch problem {
        case .fixed(let text):
            processor.reserve(RESPEncoder.errorCount(text), connection)
            processor.out.count += RESPEncoder.writeError(text, to: processor.out.end)
        case .made(let bytes):
            bytes.withUnsafeBytes { text in
                processor.reserve(RESPEncoder.errorCount(text), connection)
                processor.out.count += RESPEncoder.writeError(text, to: processor.out.end)
            }
        }
    }

    /// `-STORE <reason>`, the reason on one line, as every error reply must be.
    func respStoreFailure(_ reason: String, _ connection: Connection) {
        respError(.made(Array("STORE ".utf8) + RequestProcessor.storeFailureText(reason)), connection)
    }

    func respInteger(_ value: Int, _ connection: Connection) {
        processor.reserve(RESPEncoder.integerCount(Int64(value)), connection)
        processor.out.count += RESPEncoder.writeInteger(Int64(value), to: processor.out.end)
    }

    func respBulk(_ bytes: UnsafeRawBufferPointer, _ connection: Connection) {
        processor.reserve(RESPEncoder.bulkStringCount(length: bytes.count), connection)
        processor.out.count += RESPEncoder.writeBulkString(bytes, to: processor.out.end)
    }

    func respBulk(_ text: StaticString, _ connection: Connection) {
        processor.reserve(RESPEncoder.bulkStringCount(length: text.utf8CodeUnitCount), connection)
        processor.out.count += RESPEncoder.writeBulkString(text, to: processor.out.end)
    }

    func respNull(_ connection: Connection) {
        let null = RESPEncoder.nullBulkString(connection.resp.version)
        processor.reserve(null.utf8CodeUnitCount, connection)
        processor.out.count += RESPEncoder.write(null, to: processor.out.end)
    }

    func respArrayHeader(_ count: Int, _ connection: Connection) {
        processor.reserve(RESPEncoder.arrayHeaderCount(count), connection)
        processor.out.count += RESPEncoder.writeArrayHeader(count, to: processor.out.end)
    }

    func respMapHeader(_ pairs: Int, _ connection: Connection) {
        let version = connection.resp.version
        processor.reserve(RESPEncoder.mapHeaderCount(pairs, version), connection)
        processor.out.count += RESPEncoder.writeMapHeader(pairs, version, to: processor.out.end)
    }
}

/// How RESP answers a read the fetchers (or, for DBSIZE and SCAN, the worker) made.
enum RESPReadAnswer: ReadAnswer {
    /// A key read, or EXISTS; the job's arguments are the request's.
    case command(RESPCommandName)
    /// DBSIZE.
    case dbsize
    /// SCAN of `limit` profiles; the job's arguments are the request's, read again for MATCH.
    case scan(limit: Int)

    func write(_ job: ReadJob, through front: any WorkerFront) {
        let front = unsafeDowncast(front, to: RESPWorkerFront.self)
        let connection = job.connection
        if let failure = job.failure { return front.respStoreFailure(failure, connection) }
        if case .dbsize = self { return front.respInteger(job.count, connection) }
        var views: [UnsafeRawBufferPointer] = []
        for index in 0..<job.argumentCount { views.append(job.argument(index)) }
        views.withUnsafeBufferPointer { arguments in
            switch self {
            case .command(.exists):
                var found = 0
                for index in job.lookups.indices where job.profile(index) != nil { found += 1 }
                front.respInteger(found, connection)
            case .command(let command):
                front.writeKeyRead(command, arguments, job.lookups.isEmpty ? nil : job.profile(0), connection)
            case .scan(let limit):
                front.writeScanReply(arguments, userIds: (0..<job.rowCount).map { Array(job.row($0).userId) }, limit: limit,
                                      connection)
            case .dbsize:
                preconditionFailure("answered above")
            }
        }
    }
}
