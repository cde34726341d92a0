import Glibc
import ProfileCache
import ProfileModel
import ProfileStore
import ProfileSystem

/// A writer: group commit for the writes it is given. A server over its own store has one,
/// for every write; over a shared store it has several, each taking the writes of its share
/// of the connections (`ServerContext.writer(for:)`), so that several commits run at once.
///
/// Workers queue write jobs; the writer thread takes everything queued, hands it to the
/// store's write path as one commit, puts each written profile's new reply line into the
/// cache (where it is cached already: a write does not push out what readers use), and only
/// then hands the answers back to the workers, so no connection can read anything older once
/// a reply is out. Writes that arrive while a commit runs wait together for the next one.
///
/// When nobody is committing and the commit would be prompt and small
/// (`ProfileWritePath.commitsPromptly`: no backpressure, no sync at each commit, a store of its
/// own; at most `promptOperations`), the worker that submits commits in its own thread instead,
/// everything queued before its jobs included, as a flat-combining lock's holder does: a
/// commit then costs no hand-over to another thread and back, which is most of what a read
/// pipelined behind a write waits for.
///
/// Workers call `submit` from their threads; `run` belongs to the writer thread. Whoever holds
/// `committing` (the writer thread or a submitting worker) takes the queue and commits; the
/// scratch memory below is theirs while they hold it.
final class WriteCoordinator: @unchecked Sendable {
    private let queue = JobQueue<WriteJob>()
    /// Held for taking jobs from the queue and committing them, so commits keep queue order.
    private let committing = ConditionLock()

    private let cache: ProfileCache
    private let statistics: ServerStatistics
    let writePath: any ProfileWritePath
    /// Told of every change after the cache, so that client caches drop what they hold of it.
    private let changes: any ChangeFeed
    /// What a commit does to the cache, as the store says.
    private let cacheAfterCommit: CacheAfterCommit
    /// How the cache keeps a profile.
    private let encoding: any CachedProfileEncoding
    /// Where a committed profile is encoded for the cache; `committing`'s holder only.
    private let scratch: UnsafeMutableRawPointer
    /// A cached profile's values, copied out of the cache for the store (`KnownProfile`):
    /// `committing`'s holder only, valid until the next lookup.
    private let known: UnsafeMutableRawPointer
    private static let knownCapacity = ProfileLimits.name + ProfileLimits.portraitUri
    /// The ids of a batch, for `ProfileCache.prefetch`; `committing`'s holder only.
    private var prefetchSlots: UnsafeMutableBufferPointer<PrefetchSlot>

    init(cache: ProfileCache, encoding: any CachedProfileEncoding, statistics: ServerStatistics, writePath: any ProfileWritePath,
         changes: any ChangeFeed) {
        self.cache = cache
        self.encoding = encoding
        self.changes = changes
        self.statistics = statistics
        self.writePath = writePath
        cacheAfterCommit = writePath.cacheAfterCommit
        scratch = UnsafeMutableRawPointer.allocate(byteCount: encoding.capacity, alignment: 16)
        known = UnsafeMutableRawPointer.allocate(byteCount: Self.knownCapacity, alignment: 16)
        prefetchSlots = .allocate(capacity: 1024)
    }

    deinit {
        scratch.deallocate()
        known.deallocate()
        prefetchSlots.deallocate()
    }

    /// Commits the jobs at once in the calling worker's thread when that is prompt and nobody
    /// else is committing, and returns the answered jobs that are the caller's, for it to
    /// deliver; other workers get theirs through their inboxes. Otherwise queues the jobs for
    /// the writer thread and returns none. Called by workers.
    ///
    /// Answers are posted before `committing` is let go, so that each worker receives them
    /// in commit order; the caller's own can wait, since no job of its connections can be
    /// submitted but by its own thread.
    func submit(_ jobs: [WriteJob], from worker: Worker) -> [WriteJob] {
        var operations = 0
        for job in jobs { operations += job.operationCount }
        guard operations <= Self.promptOperations, writePath.commitsPromptly, committing.tryLock() else {
            queue.submit(jobs)
            return []
        }
        // Jobs queued before these go first: some may be of the same connections. Too many would
        // make a commit that holds up the reads of the worker's other connections.
        var batch: [WriteJob] = []
        guard queue.takeQueued(into: &batch, atMost: Self.promptOperations - operations) else {
            committing.unlock()
            queue.submit(jobs)
            return []
        }
        batch.append(contentsOf: jobs)
        commit(batch)
        var own: [WriteJob] = []
        if batch.count == jobs.count {
            own = batch
        } else {
            own.reserveCapacity(jobs.count)
            for job in batch where job.worker === worker { own.append(job) }
            post(batch.filter { $0.worker !== worker }, worker: { $0.worker }, as: WorkerMessage.answered)
        }
        committing.unlock()
        return own
    }

    /// The most operations (queued jobs counting one each) a worker commits in its own thread:
    /// a few writes, such as a pipeline of reads carries, take about 20 us, so the reads of its
    /// other connections barely wait; larger groups go to the writer thread, which batches
    /// them with everything else queued (a limit of 64 lowered SET at pipeline 16 by a tenth
    /// here, and let the GET p99 beside sustained SETs pass 2 ms).
    static let promptOperations = 8

    /// Asks the writer to finish once the queue is empty.
    func stop() { queue.stop() }

    /// The writer thread's loop: returns after `stop` once every queued job is answered.
    func run() {
        var batch: [WriteJob] = []
        while queue.waitForJobs() {
            committing.lock()
            // A worker may have committed them meanwhile.
            _ = queue.takeQueued(into: &batch)
            if !batch.isEmpty {
                commit(batch)
                post(batch, worker: { $0.worker }, as: WorkerMessage.answered)
            }
            committing.unlock()
        }
    }

    /// Commits the batch and gives each job its outcome; the cache learns every change first.
    /// While any client tracks, the batch's committed jobs share one `ChangeNotices`: each is answered
    /// once every notice the commit made is sent (a job that changed nothing may have written
    /// what an earlier job of the batch changed, whose notice is not out yet).
    private func commit(_ batch: [WriteJob]) {
        let notices = changes.isActive ? ChangeNotices() : nil
        // The writer's own count: the jobs wait at least until every feed was told.
        defer { notices?.sent() }
        prefetchCache(batch)
        let cache = self.cache
        let known = self.known
        writePath.commit(batch, knownProfile: { userId in
            cache.lookup(userId) { found in
                switch found {
                case .hit(let profile):
                    // Copied out: the cache's bytes are only valid while its shard is locked.
                    let values = profile.values
                    let name = values.name.count, portraitUri = values.portraitUri.count
                    if name > 0 { known.copyMemory(from: values.name.baseAddress!, byteCount: name) }
                    if portraitUri > 0 { (known + name).copyMemory(from: values.portraitUri.baseAddress!, byteCount: portraitUri) }
                    return .present(ProfileRow(userId: userId, name: UnsafeRawBufferPointer(start: known, count: name),
                                               portraitUri: UnsafeRawBufferPointer(start: known + name, count: portraitUri)))
                case .absent: return .absent
                case .miss: return .unknown
                }
            }
        }, report: { index, result in
            let job = batch[index]
            switch result {
            case .failed(let error) where error.kind == .outcomeUnknown:
                // It may have been applied after all: what the cache holds of its ids may be old.
                Log.error("write outcome unknown: it may or may not have been applied", ["error": "\(error)"])
                for index in 0..<job.operationCount {
                    if let userId = job.userId(at: index) { cache.invalidate(userId) } else { cache.removeAll() }
                }
                tellTracking(job, notices, changed: { _ in true })
                job.failure = error.reason
            case .failed(let error):
                Log.warn("write failed; nothing of it was committed", ["error": "\(error)"])
                job.failure = error.reason
            case .committed(let outcomes):
                publish(job, outcomes, notices)
                job.record(outcomes)
                count(job, outcomes)
            }
        })
    }

    /// Counts the profiles the job wrote and removed, for `cmd_set` and `cmd_del`.
    private func count(_ job: WriteJob, _ outcomes: WriteOutcomes) {
        var written = 0, deleted = 0
        for index in 0..<job.operationCount where outcomes.changed(index) {
            if job.removesAll(at: index) { continue }
            if outcomes.after(index) != nil {
                written += 1
            } else if outcomes.before(index).exists {
                deleted += 1
            }
        }
        if written > 0 { statistics.profilesWritten.add(written, ordering: .relaxed) }
        if deleted > 0 { statistics.profilesDeleted.add(deleted, ordering: .relaxed) }
    }

    /// Starts loading the cache entries of the batch's ids, which the commit looks up (what the
    /// cache knows of each) and then replaces, all before the first lookup: their memory misses
    /// overlap instead of following one another.
    private func prefetchCache(_ batch: [WriteJob]) {
        var operations = 0
        for job in batch { operations += job.operationCount }
        if operations > prefetchSlots.count {
            prefetchSlots.deallocate()
            prefetchSlots = .allocate(capacity: operations)
        }
        var gathered = 0
        for job in batch {
            for index in 0..<job.operationCount {
                guard let userId = job.userId(at: index) else { continue }
                prefetchSlots[gathered] = PrefetchSlot(key: userId)
                gathered += 1
            }
        }
        cache.prefetch(UnsafeMutableBufferPointer(rebasing: prefetchSlots[0..<gathered]))
    }

    /// Puts what the job's operations left into the cache.
    /// A removal of everything empties the cache first; ids written after it in the same unit
    /// are not cached then, and stay so (a write does not add to the cache).
    private func publish(_ job: WriteJob, _ outcomes: WriteOutcomes, _ notices: ChangeNotices?) {
        var removesAll = false
        for index in 0..<job.operationCount where outcomes.changed(index) {
            if job.removesAll(at: index) { removesAll = true }
        }
        if removesAll { cache.removeAll() }
        for index in 0..<job.operationCount where outcomes.changed(index) {
            if job.removesAll(at: index) { continue }
            if cacheAfterCommit == .invalidate {
                cache.invalidate(outcomes.userId(index))
                continue
            }
            guard let row = outcomes.after(index) else {
                cache.update(outcomes.userId(index), profile: nil)
                continue
            }
            cache.update(row.userId, profile: encoding.encode(row, at: scratch))
        }
        tellTracking(job, notices, changed: { outcomes.changed($0) })
    }

    /// Tells the change feed which of the job's profiles changed, once the cache holds what
    /// they are now: a client told of a change reads the new value. The job is acknowledged
    /// once the notices its commit made are sent (`WriteJob.notices`).
    private func tellTracking(_ job: WriteJob, _ notices: ChangeNotices?, changed: (Int) -> Bool) {
        guard let notices, changes.isActive else { return }
        job.notices = notices
        var userIds: [UnsafeRawBufferPointer] = []
        for index in 0..<job.operationCount where changed(index) {
            guard let userId = job.userId(at: index) else { return changes.flushAll(notices: notices) }
            userIds.append(userId)
        }
        if !userIds.isEmpty { userIds.withUnsafeBufferPointer { changes.changed($0, origin: job.changeOrigin, notices: notices) } }
    }
}

/// Makes an error text safe to put on one protocol line.
package func oneLine(_ text: String) -> String {
    String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
}
