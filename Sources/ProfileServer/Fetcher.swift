import ProfileCache
import ProfileModel
import ProfileStore
import WireBytes

/// How a front words the answer to a read it sent to the fetchers (or read at once): each front
/// keeps, with the job, what it needs to know of the request, and reads what was read, or why
/// it could not be, from the job.
///
/// Made by a worker with its job, used by that worker when the job is answered.
public protocol ReadAnswer {
    /// Writes the job's answer (its reply, or the store's failure) through the front that took
    /// the request, on the worker that took it: all of it, or, when it has parts, what comes
    /// before them.
    func write(_ job: ReadJob, through front: any WorkerFront)
    /// How many parts follow what `write` wrote (a row's line, the end): the core writes them
    /// (`writePart`) as far as the connection's replies may go, and the rest as the client
    /// reads (`UnfinishedAnswer`). 0 when `write` wrote the whole reply.
    func partCount(of job: ReadJob) -> Int
    func writePart(_ index: Int, of job: ReadJob, through front: any WorkerFront)
}

/// A read the cache cannot answer: what to read, what was read, and how its front answers.
/// Over a shared store it goes to a fetcher thread and back (a network round trip, which no
/// event loop may make); over a store the workers read themselves, a listing (COUNT, RECENT,
/// SCAN) is read into it on the worker at once (`RequestProcessor.readListing`), and answered the same way.
///
/// Created by a worker, filled in by a fetcher or by that worker, answered by that worker: each
/// side touches it only while the other cannot (the queue hand-offs order the accesses).
public final class ReadJob: @unchecked Sendable {
    /// What is read.
    package enum Read {
        /// The profiles of `lookups`.
        case lookups
        /// How many profiles there are.
        case count
        /// The newest profiles, newest first.
        case recent(limit: Int)
        /// Profiles in userId order, after `after` (from the first when empty).
        case scan(after: [UInt8], limit: Int)
    }

    package let connection: Connection
    package unowned let worker: Worker
    package let read: Read
    /// How the front words the answer.
    package let answer: any ReadAnswer
    /// The kind of request whose latency the answer ends; nil for the rest of a request counted already.
    package let kind: RequestKind?
    package let startNanos: Int
    private let arguments: ArgumentStore
    /// The ids to look up: argument indices, with `keyPrefix` bytes to skip in each.
    package let lookups: [Int]
    package let keyPrefix: Int
    /// For each lookup, the cache's ticket for filling it in, or nil when it may not be
    /// (the cache could not vouch for what it held: the lease had run out).
    package let tickets: [FillTicket?]

    // Filled in by the fetcher.
    /// For each lookup, the profile found: ranges of its name and portraitUri in `values`.
    private(set) var found: [(name: Range<Int>, portraitUri: Range<Int>)?] = []
    /// RECENT's and SCAN's rows: ranges of each id, name and portraitUri in `values`.
    private(set) var rows: [(userId: Range<Int>, name: Range<Int>, portraitUri: Range<Int>)] = []
    private(set) var values: [UInt8] = []
    package var count = 0
    package var failure: String?

    package init(connection: Connection, read: Read, answer: any ReadAnswer, kind: RequestKind?, arguments count: Int,
                 argument: (Int) -> UnsafeRawBufferPointer, lookups: [Int], keyPrefix: Int, tickets: [FillTicket?]) {
        self.connection = connection
        worker = connection.worker
        self.read = read
        self.answer = answer
        self.kind = kind
        startNanos = worker.processor.passStart
        arguments = ArgumentStore(count: count, argument: argument)
        self.lookups = lookups
        self.keyPrefix = keyPrefix
        self.tickets = tickets
    }

    package func argument(_ i: Int) -> UnsafeRawBufferPointer { arguments.argument(i) }
    package var argumentCount: Int { arguments.count }
    /// What the job holds: its arguments and what it read.
    package var heldBytes: Int { arguments.byteCount + values.capacity }

    /// Lookup `index`'s id.
    package func userId(_ index: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: argument(lookups[index])[keyPrefix...])
    }

    /// Lookup `index`'s profile, if it has one: views into the job, valid while it lives.
    package func profile(_ index: Int) -> ProfileValues? {
        guard let found = found[index] else { return nil }
        return values.withUnsafeBytes { bytes in
            ProfileValues(name: UnsafeRawBufferPointer(rebasing: bytes[found.name]),
                       portraitUri: UnsafeRawBufferPointer(rebasing: bytes[found.portraitUri]))
        }
    }

    package var rowCount: Int { rows.count }

    /// Row `index` of RECENT or SCAN, views valid while the job lives.
    package func row(_ index: Int) -> ProfileRow {
        let row = rows[index]
        return values.withUnsafeBytes { bytes in
            ProfileRow(userId: UnsafeRawBufferPointer(rebasing: bytes[row.userId]),
                       name: UnsafeRawBufferPointer(rebasing: bytes[row.name]),
                       portraitUri: UnsafeRawBufferPointer(rebasing: bytes[row.portraitUri]))
        }
    }

    fileprivate func startLookups() { found = Array(repeating: nil, count: lookups.count) }

    fileprivate func record(found index: Int, _ row: ProfileRow) {
        found[index] = (append(row.name), append(row.portraitUri))
    }

    package func record(row: ProfileRow) {
        rows.append((append(row.userId), append(row.name), append(row.portraitUri)))
    }

    private func append(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let start = values.count
        values.append(contentsOf: bytes)
        return start..<values.count
    }
}

/// The fetchers: threads that make the reads of a shared store for every worker. Each takes
/// every job queued when it wakes and looks up all of their ids in one round trip, as the
/// writer gathers writes into one commit; counts and listings go one by one.
///
/// Workers call `submit` from their threads; each fetcher thread runs `run` with a reader of
/// its own.
package final class FetchCoordinator: @unchecked Sendable {
    private let queue = JobQueue<ReadJob>()

    package func submit(_ jobs: [ReadJob]) { queue.submit(jobs) }

    /// Asks every fetcher to finish once the queue is empty.
    package func stop() { queue.stop() }

    /// A fetcher thread's loop: returns after `stop` once every queued job is answered.
    package func run(_ reader: any SharedProfileReader) {
        var batch: [ReadJob] = []
        while queue.take(into: &batch) {
            fetch(batch, reader)
            post(batch, worker: { $0.worker }, as: WorkerMessage.fetched)
        }
    }

    private func fetch(_ batch: [ReadJob], _ reader: any SharedProfileReader) {
        // Every lookup of the batch in one round trip.
        var ids: [UnsafeRawBufferPointer] = []
        var owners: [(job: ReadJob, index: Int)] = []
        for job in batch where !job.lookups.isEmpty {
            job.startLookups()
            for index in job.lookups.indices {
                ids.append(job.userId(index))
                owners.append((job, index))
            }
        }
        if !ids.isEmpty {
            do throws(StoreError) {
                try reader.lookup(ids) { index, row in owners[index].job.record(found: owners[index].index, row) }
            } catch {
                Log.warn("a read of the shared store failed", ["error": "\(error)"])
                for job in batch where !job.lookups.isEmpty { job.failure = error.reason }
            }
        }
        for job in batch { job.readListing(from: SharedListings(reader: reader)) }
    }
}

/// Where COUNT, RECENT and SCAN read: a fetcher's reader of a shared store, or a worker's own
/// reader of a store it reads on its loop.
package protocol ListingSource {
    func count() throws -> Int
    func recent(limit: Int, _ each: (ProfileRow) -> Void) throws
    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) -> Void) throws
}

/// A fetcher's reader of a shared store, each call a round trip.
package struct SharedListings: ListingSource {
    package let reader: any SharedProfileReader
    package func count() throws -> Int { try reader.count() }
    package func recent(limit: Int, _ each: (ProfileRow) -> Void) throws { try reader.recent(limit: limit, each) }
    package func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) -> Void) throws {
        try reader.scan(after: after, limit: limit, each)
    }
}

/// A worker's own reader, inside the pass's read transaction; the count is the write path's,
/// exact with every committed write.
package struct LocalListings: ListingSource {
    package let reader: any ProfileReader
    package let writePath: any ProfileWritePath
    package func count() throws -> Int { writePath.rowCount }
    package func recent(limit: Int, _ each: (ProfileRow) -> Void) throws { try reader.recent(limit: limit, each) }
    package func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) -> Void) throws {
        try reader.scan(after: after, limit: limit, each)
    }
}

extension ReadJob {
    /// Reads what a COUNT, RECENT or SCAN asks for into the job, or why it could not; a lookup
    /// job reads nothing here.
    package func readListing(from source: some ListingSource) {
        do {
            switch read {
            case .lookups:
                break
            case .count:
                count = try source.count()
            case .recent(let limit):
                try source.recent(limit: limit) { record(row: $0) }
            case .scan(let after, let limit):
                try after.withUnsafeBytes { after in try source.scan(after: after, limit: limit) { record(row: $0) } }
            }
        } catch {
            fail(error)
        }
    }

    /// Records why the read failed, for the reply; the log gets the whole error, which may
    /// name the store's file or server.
    package func fail(_ error: any Error) {
        Log.warn("a read of the store failed", ["error": "\(error)"])
        failure = (error as? StoreError)?.reason ?? "\(error)"
    }
}
