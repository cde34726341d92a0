import ProfileCache
import ProfileModel
import ProfileStore

// Reads of a shared store (several servers over PostgreSQL, docs/CLUSTER.md). The cache
// answers what it holds while the store's lease vouches for it; anything else becomes a
// `ReadJob` for the fetchers, since a round trip must not block an event loop, and is
// answered when it comes back, in request order.

/// Why a lookup cannot be answered on the event loop.
@usableFromInline package enum NeedsFetch: Error {
    /// The cache does not hold the id.
    case miss
    /// The lease ran out: the cache may be missing invalidations, so it cannot answer.
    case leaseExpired
}

extension RequestProcessor {
    /// The cache's ticket for filling `userId` in, when it does not hold it and may be filled.
    package func fillTicket(_ userId: UnsafeRawBufferPointer) -> FillTicket? {
        guard cacheVouched else { return nil }
        return context.cache.lookup(userId) { outcome in
            if case .miss(let ticket) = outcome { return ticket }
            return nil
        }
    }

    /// Queues a read for the fetchers at the end of the pass; its answer comes back to this worker.
    package func submitFetch(_ read: ReadJob.Read, answer: any ReadAnswer, kind: RequestKind?, arguments count: Int,
                             argument: (Int) -> UnsafeRawBufferPointer, lookups: [Int], keyPrefix: Int, tickets: [FillTicket?],
                             _ connection: Connection) {
        queueFetch(ReadJob(connection: connection, read: read, answer: answer, kind: kind, arguments: count,
                           argument: argument, lookups: lookups, keyPrefix: keyPrefix, tickets: tickets), connection)
    }

    private func queueFetch(_ job: ReadJob, _ connection: Connection) {
        fetchJobs.append(job)
        connection.readsInFlight += 1
    }

    /// COUNT, RECENT and the SCANs of either front: read at once where this worker reads the
    /// store itself, or queued for the fetchers; answered by `answerFetched` either way.
    package func readListing(_ read: ReadJob.Read, answer: any ReadAnswer, kind: RequestKind, arguments count: Int,
                             argument: (Int) -> UnsafeRawBufferPointer, _ connection: Connection) {
        let job = ReadJob(connection: connection, read: read, answer: answer, kind: kind, arguments: count, argument: argument,
                          lookups: [], keyPrefix: 0, tickets: [])
        if reads.readListing(into: job) {
            answerFetched(job, through: job.worker.fronts[connection.frontIndex])
        } else {
            queueFetch(job, connection)
        }
    }

    /// Answers a read the fetchers (or, for a listing, this worker) made: fills the cache with
    /// what it found (where the cache may take it) and writes the reply as the request's front
    /// words it.
    package func answerFetched(_ job: ReadJob, through front: any WorkerFront) {
        if job.failure == nil { fillCache(from: job) }
        writeAnswer(of: job, through: front)
    }

    /// Puts the profiles a job read into the cache, where it may take them, and counts the lookups.
    private func fillCache(from job: ReadJob) {
        for index in job.lookups.indices {
            counters.getLookups += 1
            counters.cacheMisses += 1
            let values = job.profile(index)
            if values != nil { counters.getHits += 1 } else { counters.getMisses += 1 }
            guard let ticket = job.tickets[index] else { continue }
            let userId = job.userId(index)
            if let values {
                let row = ProfileRow(userId: userId, name: values.name, portraitUri: values.portraitUri)
                context.cache.fill(userId, profile: context.cacheEncoding.encode(row, at: valueScratch), ticket: ticket)
            } else {
                context.cache.fill(userId, profile: nil, ticket: ticket)
            }
        }
    }
}
