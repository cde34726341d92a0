import Glibc
import ProfileCache
import ProfileStore
import ProfileSystem

// How the server reads its store where its cache cannot answer, and what keeps that cache
// right. `Server.init` makes one of the two kinds from what the executable opened
// (`OpenedStore.Readers`): that is the one place the server tells a store of its own from a
// shared one. The request path asks a worker's `WorkerReads`, and knows no more.

/// The store's reads for the whole server: each worker's side, and what runs beside the
/// workers (fetcher threads, following changes made elsewhere, the lease watch).
///
/// Threading: made, started and stopped on the main thread (`Server`); `workerReads` there
/// too, before the workers start; `sharedStatistics` from any thread.
package protocol StoreReads: AnyObject, Sendable {
    /// Worker `index`'s side; asked once per worker.
    func workerReads(_ index: Int) -> any WorkerReads
    /// Starts what reads and follows the store beside the workers.
    func start(cache: ProfileCache, changes: any ChangeFeed)
    /// Stops the reads made beside the workers, once the workers have stopped: every read
    /// queued is answered first.
    func stopReading()
    /// Stops following changes, once the writers have stopped.
    func stopFollowing()
    /// A shared store's counters for STATS and /metrics (zeros for a store of the server's own).
    var sharedStatistics: SharedStoreStatistics { get }
    /// Whether other servers share the store (a node, docs/CLUSTER.md).
    var isShared: Bool { get }
}

/// One worker's reads of what its cache missed.
///
/// Threading: the worker's thread.
package protocol WorkerReads: AnyObject {
    /// Whether a read the cache cannot answer is answered at once, on this worker's loop;
    /// otherwise it goes to the fetchers and is answered later. Answering a read ahead of the
    /// connection's writes, and a SCAN inside MULTI (EXEC answers at once), need the former.
    var readsAtOnce: Bool { get }
    /// Whether the cache may answer during a pass starting at `now` (monotonic nanoseconds).
    func cacheMayAnswer(at now: Int) -> Bool
    /// Looks a profile the cache missed up at once and calls `body` with it (nil: none).
    /// - Throws: the store's error, or `NeedsFetch.miss` where the fetchers read (`body` has
    ///   not run then).
    func lookUp<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R
    /// Reads the COUNT, RECENT or SCAN of `job` into it at once and returns true, or returns
    /// false where the fetchers read it.
    func readListing(into job: ReadJob) -> Bool
    /// The pass is over: the reads it made end, so that the next pass sees every commit
    /// answered by then.
    func endPass()
    /// Hands the reads a pass queued to the fetchers.
    func submit(_ jobs: [ReadJob])
    /// Lets go of what it holds of the store; the last call, when the worker stops.
    func release()
}

/// A store of this server's own: every worker reads it on its loop, with a reader of its own.
package final class WorkersReadTheStore: StoreReads, @unchecked Sendable {
    /// Each worker's reader until the worker takes it.
    private var readers: [(any ProfileReader)?]
    private let writePath: any ProfileWritePath

    /// Opens every worker's reader now, so that a store that cannot be read fails the start.
    package init(workers: Int, makeReader: () throws -> any ProfileReader, writePath: any ProfileWritePath) throws {
        readers = try (0..<workers).map { _ in try makeReader() }
        self.writePath = writePath
    }

    package func workerReads(_ index: Int) -> any WorkerReads {
        defer { readers[index] = nil }
        return OwnReader(readers[index]!, writePath: writePath)
    }

    // Nothing runs beside the workers, and every change is this server's own.
    package func start(cache: ProfileCache, changes: any ChangeFeed) {}
    package func stopReading() {}
    package func stopFollowing() {}
    package var sharedStatistics: SharedStoreStatistics { SharedStoreStatistics() }
    package var isShared: Bool { false }

    /// A worker's reader: cache misses in one pass share one read transaction (the reader
    /// renews it when the store's table moved on meanwhile).
    private final class OwnReader: WorkerReads {
        private var reader: (any ProfileReader)?
        private let writePath: any ProfileWritePath
        private var transactionOpen = false

        init(_ reader: any ProfileReader, writePath: any ProfileWritePath) {
            self.reader = reader
            self.writePath = writePath
        }

        var readsAtOnce: Bool { true }

        func cacheMayAnswer(at now: Int) -> Bool { true }

        func lookUp<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R {
            try beginTransaction()
            return try reader!.lookup(userId, body)
        }

        func readListing(into job: ReadJob) -> Bool {
            do {
                try beginTransaction()
                job.readListing(from: LocalListings(reader: reader!, writePath: writePath))
            } catch {
                job.fail(error)
            }
            return true
        }

        private func beginTransaction() throws {
            guard !transactionOpen else { return }
            try reader!.beginRead()
            transactionOpen = true
        }

        func endPass() {
            guard transactionOpen else { return }
            reader!.endRead()
            transactionOpen = false
        }

        func submit(_ jobs: [ReadJob]) {
            precondition(jobs.isEmpty, "a store the workers read has no fetchers")
        }

        func release() { reader = nil }
    }
}

/// A store several servers share: fetcher threads make its reads, since each is a round trip
/// no event loop may wait for; its notifications of changes made anywhere clear the cache and
/// reach tracking clients; the cache answers only while the store's lease vouches for it.
package final class FetchersReadTheStore: StoreReads, @unchecked Sendable {
    private let store: any SharedProfileStore
    private let fetcher = FetchCoordinator()
    /// The fetcher threads' readers, until `start` hands each to its thread.
    private var readers: [any SharedProfileReader]
    private var fetcherThreads: [pthread_t] = []
    /// Tells tracking clients to drop everything while the lease is out.
    private var leaseWatch: (LeaseWatch, pthread_t)?

    package init(store: any SharedProfileStore, readers: [any SharedProfileReader]) {
        precondition(!readers.isEmpty, "a shared store is read by fetchers")
        self.store = store
        self.readers = readers
    }

    package func workerReads(_ index: Int) -> any WorkerReads { Fetched(store: store, fetcher: fetcher) }

    package func start(cache: ProfileCache, changes: any ChangeFeed) {
        let fetcher = self.fetcher
        for (index, reader) in readers.enumerated() {
            nonisolated(unsafe) let reader = reader
            fetcherThreads.append(startThread("fetcher-\(index)") { fetcher.run(reader) })
        }
        readers.removeAll()
        do {
            // The cache first: a client told of a change reads past it. The cache forgets this
            // server's own changes again (harmless, and it keeps no reasoning about fills racing
            // a commit); tracking clients were told of them at the commit, and a second push
            // would cost each a needless read (and break NOLOOP).
            try store.follow(invalidate: { ids, origin in
                                 for id in ids { cache.invalidate(id) }
                                 if origin == .elsewhere { changes.changed(ids, origin: 0, notices: nil) }
                             },
                             invalidateAll: { origin in
                                 cache.removeAll()
                                 if origin == .elsewhere { changes.flushAll(notices: nil) }
                             })
        } catch {
            Log.error("cannot follow the shared store's changes", ["error": "\(error)"])
        }
        let watch = LeaseWatch(store: store, changes: changes)
        leaseWatch = (watch, startThread("lease-watch") { watch.run() })
    }

    package func stopReading() {
        fetcher.stop()
        for thread in fetcherThreads { pthread_join(thread, nil) }
        fetcherThreads.removeAll()
    }

    package func stopFollowing() {
        if let (watch, thread) = leaseWatch {
            watch.stop()
            pthread_join(thread, nil)
            leaseWatch = nil
        }
        store.stopFollowing()
    }

    package var sharedStatistics: SharedStoreStatistics { store.sharedStatistics }
    package var isShared: Bool { true }

    /// A worker's side: misses and listings go to the fetchers at the end of the pass.
    private final class Fetched: WorkerReads {
        private let store: any SharedProfileStore
        private let fetcher: FetchCoordinator

        init(store: any SharedProfileStore, fetcher: FetchCoordinator) {
            self.store = store
            self.fetcher = fetcher
        }

        var readsAtOnce: Bool { false }

        /// Asked once per pass: the lease runs for a second, a pass for a fraction of a millisecond.
        func cacheMayAnswer(at now: Int) -> Bool { store.cacheMayAnswer(at: now) }

        func lookUp<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R {
            throw NeedsFetch.miss
        }

        func readListing(into job: ReadJob) -> Bool { false }

        func endPass() {}

        func submit(_ jobs: [ReadJob]) { fetcher.submit(jobs) }

        func release() {}
    }
}
