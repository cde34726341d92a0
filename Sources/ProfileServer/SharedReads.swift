import ProfileCache
import ProfileModel
import ProfileProtocol
import ProfileStore
import RESPProtocol

// Reads of a shared store (several servers over PostgreSQL, docs/CLUSTER.md). The cache
// answers what it holds while the store's lease vouches for it; anything else becomes a
// `ReadJob` for the fetchers, since a round trip must not block an event loop, and is
// answered when it comes back, in request order.

/// Why a lookup cannot be answered on the event loop.
enum NeedsFetch: Error {
    /// The cache does not hold the id.
    case miss
    /// The lease ran out: the cache may be missing invalidations, so it cannot answer.
    case leaseExpired
}

extension Verb {
    /// Whether a shared store's fetchers answer it when the cache cannot.
    var isFetched: Bool {
        switch self {
        case .get, .mget, .exists, .count, .recent, .scan: true
        default: false
        }
    }
}

extension RESPCommandName {
    /// Whether a shared store's fetchers answer it when the cache cannot.
    var isFetched: Bool { readsKey || self == .exists || self == .scan || self == .dbsize }
}

extension Worker {
    /// GET, EXISTS or MGET over a shared store: from the cache when it holds every id and may
    /// answer, else all of it from the store.
    func lookUpShared(_ verb: Verb, count: Int, mustFetch: Bool, _ connection: Connection,
                      id: (Int) -> UnsafeRawBufferPointer) {
        let mark = Mark(self, connection)
        // A fetch answers every id, and counts them then.
        let countersBefore = counters
        do {
            if mustFetch { throw NeedsFetch.miss }
            if verb == .mget {
                try lookUpMGET(count: count, on: connection, id: id)
            } else {
                try lookUp(id(0), exists: verb == .exists, on: connection)
            }
        } catch let reason as NeedsFetch {
            takeBack(since: mark, on: connection)
            counters = countersBefore
            if reason == .leaseExpired { counters.leaseExpiredReads += 1 }
            submitFetch(.line(verb), verb: verb, arguments: count, argument: id, lookups: Array(0..<count), keyPrefix: 0,
                        tickets: (0..<count).map { fillTicket(id($0)) }, connection)
        } catch {
            // The cache never throws anything else here.
            preconditionFailure("a shared lookup failed with \(error)")
        }
    }

    /// The cache's ticket for filling `userId` in, when it does not hold it and may be filled.
    func fillTicket(_ userId: UnsafeRawBufferPointer) -> FillTicket? {
        guard cacheVouched else { return nil }
        return context.cache.lookup(userId) { outcome in
            if case .miss(let ticket) = outcome { return ticket }
            return nil
        }
    }

    /// Queues a read for the fetchers at the end of the pass; its answer comes back to this worker.
    func submitFetch(_ request: ReadJob.Request, verb: Verb, arguments count: Int, argument: (Int) -> UnsafeRawBufferPointer,
                     lookups: [Int], keyPrefix: Int, tickets: [FillTicket?], _ connection: Connection) {
        fetchJobs.append(ReadJob(connection: connection, request: request, verb: verb, arguments: count, argument: argument,
                                 lookups: lookups, keyPrefix: keyPrefix, tickets: tickets))
        connection.readsInFlight += 1
    }

    /// A fetched GET, EXISTS or MGET of the line protocol (or the rest of an MGET): a line per
    /// id, then END after an MGET's.
    private func writeLookups(_ job: ReadJob, _ verb: Verb, _ connection: Connection) {
        for index in job.lookups.indices {
            let userId = job.userId(index)
            switch (verb, job.profile(index)) {
            case (.exists, let values):
                reply(values == nil ? ReplyEncoder.no : ReplyEncoder.yes, connection)
            case (_, let values?):
                appendValueLine(ProfileRow(userId: userId, name: values.name, portraitUri: values.portraitUri), connection)
            case (_, nil):
                reserve(ReplyEncoder.notFoundLineCount(userId: userId), connection)
                out.count += ReplyEncoder.writeNotFoundLine(userId: userId, to: out.end)
            }
        }
        if verb == .mget {
            reply(ReplyEncoder.end, connection)
        }
    }

    /// COUNT, RECENT and the SCANs of either front: read at once on this worker's own reader of
    /// a store it reads itself, or queued for the fetchers of a shared one; answered by
    /// `answerFetched` either way.
    func readListing(_ request: ReadJob.Request, verb: Verb, arguments count: Int,
                     argument: (Int) -> UnsafeRawBufferPointer, _ connection: Connection) {
        guard let reader else {
            return submitFetch(request, verb: verb, arguments: count, argument: argument, lookups: [], keyPrefix: 0,
                               tickets: [], connection)
        }
        let job = ReadJob(connection: connection, request: request, verb: verb, arguments: count, argument: argument,
                          lookups: [], keyPrefix: 0, tickets: [])
        do {
            try beginReadTransaction()
            job.readListing(from: LocalListings(reader: reader, writePath: context.writePath))
        } catch {
            job.fail(error)
        }
        answerFetched(job)
    }

    /// Answers a read the fetchers (or, for a listing, this worker) made: fills the cache with
    /// what it found (where the cache may take it) and writes the reply as the request's front
    /// words it.
    func answerFetched(_ job: ReadJob) {
        let connection = job.connection
        if let failure = job.failure {
            if case .restOfMGET = job.request { return abandonPartlySentMGET(on: connection, failure) }
            if connection.front == .resp { respStoreFailure(failure, connection) } else { reply(storeFailure: failure, to: connection) }
            return
        }
        for index in job.lookups.indices {
            counters.getLookups += 1
            counters.cacheMisses += 1
            let values = job.profile(index)
            if values != nil { counters.getHits += 1 } else { counters.getMisses += 1 }
            guard let ticket = job.tickets[index] else { continue }
            let userId = job.userId(index)
            if let values {
                let row = ProfileRow(userId: userId, name: values.name, portraitUri: values.portraitUri)
                context.cache.fill(userId, profile: encodeForCache(row, at: valueScratch), ticket: ticket)
            } else {
                context.cache.fill(userId, profile: nil, ticket: ticket)
            }
        }
        switch job.request {
        case .line(let verb):
            writeLookups(job, verb, connection)
        case .restOfMGET:
            writeLookups(job, .mget, connection)
        case .count(.line):
            reply("COUNT", number: job.count, connection)
        case .count(.resp):
            respInteger(job.count, connection)
        case .recent, .scan:
            for index in 0..<job.rowCount { appendValueLine(job.row(index), connection) }
            reply(ReplyEncoder.end, connection)
        case .resp(let command):
            var views: [UnsafeRawBufferPointer] = []
            for index in 0..<job.argumentCount { views.append(job.argument(index)) }
            views.withUnsafeBufferPointer { arguments in
                if command == .exists {
                    var found = 0
                    for index in job.lookups.indices where job.profile(index) != nil { found += 1 }
                    respInteger(found, connection)
                } else {
                    writeKeyRead(command, arguments, job.lookups.isEmpty ? nil : job.profile(0), connection)
                }
            }
        case .respScan(_, let limit):
            var views: [UnsafeRawBufferPointer] = []
            for index in 0..<job.argumentCount { views.append(job.argument(index)) }
            views.withUnsafeBufferPointer { arguments in
                writeScanReply(arguments, userIds: (0..<job.rowCount).map { Array(job.row($0).userId) }, limit: limit, connection)
            }
        }
    }

    /// A RESP key read or EXISTS that the cache could not answer: all of it from the store.
    func fetchRESP(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                   _ connection: Connection) {
        let keys = command == .exists ? Array(1..<arguments.count) : [1]
        let lookups = keys.filter { context.respKeyspace.userId(ofKey: arguments[$0]) != nil }
        let prefix = context.configuration.respKeyPrefix.count
        submitFetch(.resp(command), verb: command.verb, arguments: arguments.count, argument: { arguments[$0] },
                    lookups: lookups, keyPrefix: prefix,
                    tickets: lookups.map { fillTicket(UnsafeRawBufferPointer(rebasing: arguments[$0][prefix...])) }, connection)
    }
}
