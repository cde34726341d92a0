import CLibevent
import Glibc
import ProfileCache
import ProfileProtocol
import ProfileStore
import Synchronization

/// The single writer and the folder: group commit for every write the server accepts.
///
/// Writes are committed to the store's write log (appends, cheap whatever ids they touch)
/// and their values pinned in the cache, which then holds every write the table does not
/// have yet; a folder thread merges each generation of the log into the table in sorted
/// ranges of ids, unpinning each range as it commits, and the writer empties it. Reads of the
/// cache are therefore always current, and a miss may read the table.
///
/// Workers call `submit` from their threads; `run` belongs to the writer thread and
/// `runFolder` to the folder thread. Writes that arrive while a commit is running wait
/// together and go into the next transaction; each is answered only after that transaction
/// committed and the cache holds the new value, so no connection can read anything older
/// once the reply is out.
final class WriteCoordinator: @unchecked Sendable {
    /// Guards everything below up to the writer-thread state; both threads wait on it.
    private let lock = ConditionLock()
    private var queue: [WriteJob] = []
    private var stopping = false
    private var writerFinished = false
    private var folderStopping = false
    /// The folder asks the writer to switch generations; the writer answers with the
    /// generation to fold, between two of its transactions.
    private var flipRequested = false
    private var foldingGeneration: Int?
    private var foldPending = false
    /// A generation merged into the table, for the writer to empty.
    private var mergedGeneration: Int?
    /// A FLUSHALL the writer hands the folder, which owns the table's writes.
    private var flushRequest: WriteJob?
    /// Bytes of cache entries pinned in each generation (an upper bound: a rewritten id counts twice).
    private var pinnedBytes = [0, 0]
    /// The newest write sequence in the generation being folded.
    private var sequenceAtFlip = 0
    /// Why the last fold or emptying of a generation failed, for the barriers waiting on it;
    /// cleared when they are answered, and when a fold or an emptying succeeds (a barrier
    /// that comes later must not get an error that no longer holds).
    private var foldFailure: String?
    /// Barriers registered and not yet answered: a client waits for the next fold. The writer
    /// thread's `barriers.count`, copied here under the lock for `foldIsUrgent` on the folder.
    private var waitingBarriers = 0

    // Writer thread only.
    private var writeGeneration = 0
    /// Failed attempts in a row to empty a merged generation; the first is logged.
    private var emptyFailures = 0
    private var barriers: [(job: WriteJob, sequence: Int)] = []
    /// Encodes VALUE lines for the cache.
    private let scratch: UnsafeMutableRawPointer
    private let scratchCapacity = 65536

    private let cache: ProfileCache
    private let statistics: ServerStatistics
    /// Pins beyond this wait for a fold: the cache may exceed its budget by about this much.
    private let pinLimitBytes: Int

    /// Counts batches published, and folds: bumped after a commit's values are in the cache
    /// and before anyone is answered, and after a fold committed and before its entries are
    /// unpinned. A reader whose snapshot began before a bump may hold older values, so it
    /// must not put them into the cache, and must start a new snapshot before it trusts a miss.
    let publishedBatches = Atomic<Int>(0)
    /// The newest write sequence committed to the log, and the newest the table has: when
    /// they differ, COUNT, RECENT, SCAN and STATS wait for a fold (see
    /// `WriteJob.Operation.barrier`), and the folder has a generation to merge. Stored under
    /// `lock` (the folded one) or by the writer thread (the committed one).
    let committedSequence = Atomic<Int>(0)
    let foldedSequence = Atomic<Int>(0)
    /// `foldIsUrgent`, kept current for a background fold to read without the lock.
    private let foldUrgent = Atomic<Bool>(false)
    private let idleRefusalLogged = Atomic<Bool>(false)

    init(cache: ProfileCache, statistics: ServerStatistics, pinLimitBytes: Int, lastSequence: Int64) {
        self.cache = cache
        self.statistics = statistics
        self.pinLimitBytes = pinLimitBytes
        committedSequence.store(Int(lastSequence), ordering: .relaxed)
        foldedSequence.store(Int(lastSequence), ordering: .relaxed)
        scratch = UnsafeMutableRawPointer.allocate(byteCount: scratchCapacity, alignment: 16)
    }

    deinit { scratch.deallocate() }

    /// Queues jobs; called by workers.
    func submit(_ jobs: [WriteJob]) {
        lock.lock()
        queue.append(contentsOf: jobs)
        lock.unlock()
        lock.broadcast()
    }

    /// Asks the writer to finish once the queue is empty.
    func stop() {
        lock.lock()
        stopping = true
        noteUrgency()
        lock.unlock()
        lock.broadcast()
    }

    /// Asks the folder to merge what is left and finish; after the writer finished.
    func stopFolder() {
        lock.lock()
        folderStopping = true
        noteUrgency()
        lock.unlock()
        lock.broadcast()
    }

    /// Whether the table lacks writes committed so far; any thread.
    var hasUnfoldedWrites: Bool {
        committedSequence.load(ordering: .acquiring) != foldedSequence.load(ordering: .acquiring)
    }

    /// Writes committed to the log whose generation's merge has not finished (each write
    /// takes one sequence number); any thread.
    var unmergedWrites: Int {
        max(committedSequence.load(ordering: .relaxed) - foldedSequence.load(ordering: .relaxed), 0)
    }

    // MARK: The writer thread

    /// The writer thread's loop: returns after `stop` once every queued job is answered.
    ///
    /// - Parameters:
    ///   - log: appends to the write log.
    ///   - reader: reads the table for UPDATE and DEL of ids the cache does not hold.
    func run(log: any WriteLogWriter, reader: any ProfileReader) {
        var batch: [WriteJob] = []
        while true {
            lock.lock()
            while !writerHasWork { lock.wait() }
            if queue.isEmpty && stopping && mergedGeneration == nil && !flipRequested && barriers.isEmpty {
                writerFinished = true
                lock.unlock()
                lock.broadcast()
                break
            }
            if pinnedBytes[0] + pinnedBytes[1] < pinLimitBytes { swap(&batch, &queue) }
            let merged = mergedGeneration
            mergedGeneration = nil
            if flipRequested {
                // The folder merges the generation written so far; new writes go to the other.
                // All in this one critical section: the folder asks for the next flip only
                // once it sees this one.
                precondition(foldingGeneration == nil, "a flip while a generation is being folded")
                flipRequested = false
                foldingGeneration = writeGeneration
                foldPending = true
                sequenceAtFlip = Int(log.lastSequence)
                writeGeneration = 1 - writeGeneration
                lock.broadcast()
            }
            lock.unlock()

            if let merged { empty(generation: merged, log: log) }
            if !batch.isEmpty {
                commit(batch, log: log, reader: reader)
                deliver(batch.filter { if case .barrier = $0.operation { false } else { true } })
                batch.removeAll(keepingCapacity: true)
            }
            answerBarriers()
        }
    }

    /// Checked with the lock held.
    private var writerHasWork: Bool {
        (!queue.isEmpty && pinnedBytes[0] + pinnedBytes[1] < pinLimitBytes)
            || mergedGeneration != nil || flipRequested
            || (!barriers.isEmpty
                && (barriers[0].sequence <= foldedSequence.load(ordering: .relaxed) || foldFailure != nil))
            || (stopping && queue.isEmpty && barriers.isEmpty)
    }

    /// Empties a generation the folder merged and unpinned; then the folder may flip again.
    private func empty(generation: Int, log: any WriteLogWriter) {
        do {
            try log.truncate(generation: generation)
        } catch {
            // The rows are in the table already; the generation cannot be reused until it is
            // empty, so the writer tries again shortly (meanwhile writes still go to the other).
            let reason = oneLine("\(error)")
            emptyFailures += 1
            if emptyFailures == 1 { Log.warn("emptying a merged log generation failed; retrying", ["error": reason]) }
            usleep(100_000)
            lock.lock()
            mergedGeneration = generation
            // No fold can start meanwhile: reads waiting for one get the error.
            foldFailure = reason
            lock.unlock()
            return
        }
        emptyFailures = 0
        lock.lock()
        pinnedBytes[generation] = 0
        foldingGeneration = nil
        foldFailure = nil
        noteUrgency()
        lock.unlock()
        lock.broadcast()
    }

    /// Commits the batch: runs of SET and MSET share one transaction; UPDATE and DEL read the
    /// current profile first, so each commits what came before it and then goes alone.
    private func commit(_ batch: [WriteJob], log: any WriteLogWriter, reader: any ProfileReader) {
        var run: [WriteJob] = []
        for job in batch {
            switch job.operation {
            case .set, .mset:
                run.append(job)
            case .update, .del:
                commit(run, log: log)
                run.removeAll(keepingCapacity: true)
                commitReadingCurrent(job, log: log, reader: reader)
            case .flushAll:
                commit(run, log: log)
                run.removeAll(keepingCapacity: true)
                flush(job)
            case .barrier:
                // Everything acknowledged before it was committed before it.
                let sequence = committedSequence.load(ordering: .relaxed)
                job.outcome = .barrierPassed
                barriers.append((job, sequence))
                lock.lock()
                waitingBarriers = barriers.count
                noteUrgency()
                lock.unlock()
            }
        }
        commit(run, log: log)
    }

    /// Commits SETs and MSETs in one log transaction. If that fails, every job in it is
    /// answered ERROR STORE and none of them changed anything: what fails a commit here (a
    /// full disk, an I/O error, a lock held past the busy timeout) fails a smaller one too.
    private func commit(_ jobs: [WriteJob], log: any WriteLogWriter) {
        guard !jobs.isEmpty else { return }
        let generation = writeGeneration
        do {
            try log.transaction {
                for job in jobs {
                    try job.withArguments { argument in
                        switch job.operation {
                        case .set:
                            try log.append(generation: generation, userId: argument(0), name: argument(1),
                                           portraitUri: argument(2))
                            job.outcome = .stored
                        case .mset(let triples):
                            for t in 0..<triples {
                                try log.append(generation: generation, userId: argument(3 * t),
                                               name: argument(3 * t + 1), portraitUri: argument(3 * t + 2))
                            }
                            job.outcome = .storedCount(triples)
                        default:
                            preconditionFailure("only SET and MSET share a transaction")
                        }
                    }
                }
            }
        } catch {
            fail(jobs, error)
            return
        }
        var bytes = 0
        for job in jobs {
            job.withArguments { argument in
                let triples = if case .mset(let n) = job.operation { n } else { 1 }
                for t in 0..<triples {
                    bytes += cacheValue(userId: argument(3 * t), name: argument(3 * t + 1),
                                        portraitUri: argument(3 * t + 2), generation: generation)
                }
            }
            statistics.profilesWritten.add(job.profilesWritten, ordering: .relaxed)
        }
        published(bytes: bytes, generation: generation, log: log)
    }

    /// UPDATE and DEL: the current profile comes from the cache, which holds every write the
    /// table lacks, or else from the table.
    private func commitReadingCurrent(_ job: WriteJob, log: any WriteLogWriter, reader: any ProfileReader) {
        let generation = writeGeneration
        do {
            try job.withArguments { argument in
                let userId = argument(0)
                guard let current = try currentProfile(userId, reader: reader) else {
                    job.outcome = .notFound
                    return
                }
                switch job.operation {
                case .update(let hasName, let hasPortraitUri):
                    var next = 1
                    let name = hasName ? Array(argument(next)) : current.name
                    if hasName { next += 1 }
                    let portraitUri = hasPortraitUri ? Array(argument(next)) : current.portraitUri
                    try name.withUnsafeBytes { name in
                        try portraitUri.withUnsafeBytes { portraitUri in
                            try log.transaction {
                                try log.append(generation: generation, userId: userId, name: name, portraitUri: portraitUri)
                            }
                            let bytes = cacheValue(userId: userId, name: name, portraitUri: portraitUri, generation: generation)
                            job.outcome = .updated
                            statistics.profilesWritten.add(1, ordering: .relaxed)
                            published(bytes: bytes, generation: generation, log: log)
                        }
                    }
                case .del:
                    try log.transaction { try log.appendRemoval(generation: generation, userId: userId) }
                    cache.store(userId, reply: nil, pinnedIn: generation)
                    job.outcome = .deleted
                    statistics.profilesDeleted.add(1, ordering: .relaxed)
                    published(bytes: Self.pinnedBytes(absenceOf: userId), generation: generation, log: log)
                default:
                    preconditionFailure("only UPDATE and DEL read the current profile")
                }
            }
        } catch {
            fail([job], error)
        }
    }

    /// The profile as it is now, fields copied out; nil when there is none.
    private func currentProfile(_ userId: UnsafeRawBufferPointer,
                                reader: any ProfileReader) throws -> (name: [UInt8], portraitUri: [UInt8])? {
        enum Cached { case line([UInt8]), absent, miss }
        let cached: Cached = cache.lookup(userId) { found in
            switch found {
            case .hit(let reply): .line(Array(reply))
            case .absent: .absent
            case .miss: .miss
            }
        }
        switch cached {
        case .absent:
            return nil
        case .line(let line):
            // A reply line the writer or a reader encoded: VALUE id name uri, LF.
            let tokens = try LineTokenizer.tokens(of: line.dropLast())
            guard tokens.count == 4 else { preconditionFailure("a cached reply is not a VALUE line") }
            return (tokens[2], tokens[3])
        case .miss:
            return try reader.lookup(userId) { row in
                row.map { (Array($0.name), Array($0.portraitUri)) }
            }
        }
    }

    /// FLUSHALL: the folder empties table and log in one transaction (it owns the table's
    /// writes); the writer waits for it, so no write overtakes the flush.
    private func flush(_ job: WriteJob) {
        lock.lock()
        flushRequest = job
        noteUrgency()
        lock.broadcast()
        while flushRequest != nil { lock.wait() }
        if case .flushed = job.outcome {
            pinnedBytes = [0, 0]
            foldedSequence.store(committedSequence.load(ordering: .relaxed), ordering: .releasing)
        }
        noteUrgency()
        lock.unlock()
        if case .flushed = job.outcome {
            // Bumped before the entries go, so a reader that misses afterwards starts a new snapshot.
            publishedBatches.add(1, ordering: .releasing)
            cache.removeAll()
        }
    }

    /// After a commit: count what it pinned, make it visible, and wake the folder.
    private func published(bytes: Int, generation: Int, log: any WriteLogWriter) {
        committedSequence.store(Int(log.lastSequence), ordering: .releasing)
        publishedBatches.add(1, ordering: .releasing)
        lock.lock()
        pinnedBytes[generation] += bytes
        noteUrgency()
        lock.unlock()
        lock.broadcast()
    }

    private func fail(_ jobs: [WriteJob], _ error: any Error) {
        let reason = oneLine("\(error)")
        Log.warn("write failed; nothing of it was committed", ["jobs": "\(jobs.count)", "error": reason])
        for job in jobs { job.outcome = .failed(reason) }
    }

    /// Pins the new VALUE line in the cache; returns its size.
    private func cacheValue(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                            portraitUri: UnsafeRawBufferPointer, generation: Int) -> Int {
        let count = ReplyEncoder.writeValueLine(userId: userId, name: name, portraitUri: portraitUri, to: scratch)
        cache.store(userId, reply: UnsafeRawBufferPointer(start: scratch, count: count), pinnedIn: generation)
        return Self.pinnedBytes(replyCount: count)
    }

    /// Answers the barriers whose writes the table has by now; when a fold failed, the rest
    /// get its error: their read cannot see every write before it.
    private func answerBarriers() {
        guard !barriers.isEmpty else { return }
        lock.lock()
        let through = foldedSequence.load(ordering: .relaxed)
        let failure = foldFailure
        foldFailure = nil
        lock.unlock()
        var ready: [WriteJob] = []
        while let first = barriers.first, first.sequence <= through {
            ready.append(first.job)
            barriers.removeFirst()
        }
        if let failure {
            for (job, _) in barriers { job.outcome = .failed(failure) }
            ready += barriers.map(\.job)
            barriers.removeAll()
        }
        if !ready.isEmpty {
            lock.lock()
            waitingBarriers = barriers.count
            noteUrgency()
            lock.unlock()
            deliver(ready)
        }
    }

    /// Hands answered jobs back to the workers that took them, in order.
    private func deliver(_ batch: [WriteJob]) {
        var byWorker: [(worker: Worker, jobs: [WriteJob])] = []
        for job in batch {
            let worker = job.worker
            if let i = byWorker.firstIndex(where: { $0.worker === worker }) {
                byWorker[i].jobs.append(job)
            } else {
                byWorker.append((worker, [job]))
            }
        }
        for (worker, jobs) in byWorker { worker.post(.answered(jobs)) }
    }

    // MARK: The folder thread

    /// The folder thread's loop: merges each generation the writer hands it into the table,
    /// and runs FLUSHALL. After `stopFolder` it merges what is left and checkpoints.
    ///
    /// - Parameters:
    ///   - folder: its connection to the table, with the log attached.
    ///   - writer: the table's writer, for the last checkpoint.
    func runFolder(folder: any WriteLogFolder, writer: any ProfileWriter) {
        // Even an urgent merge is background work next to the request path: at nice 10 it
        // still gets a tenth of a busy core, and all of an idle one.
        if profiled_nice_this_thread(10) != 0 {
            Log.warn("cannot lower the folder thread's priority", ["error": String(cString: strerror(errno))])
        }
        var failures = 0
        while true {
            lock.lock()
            while !folderHasWork { lock.wait() }
            if let job = flushRequest {
                lock.unlock()
                do {
                    try folder.deleteEverything()
                    job.outcome = .flushed
                } catch {
                    fail([job], error)
                }
                lock.lock()
                flushRequest = nil
                lock.unlock()
                lock.broadcast()
                continue
            }
            if folderStopping && writerFinished && !foldPending {
                lock.unlock()
                break
            }
            if foldPending, let generation = foldingGeneration {
                let through = sequenceAtFlip
                lock.unlock()
                do {
                    try fold(generation: generation, folder: folder)
                    failures = 0
                } catch {
                    failures += 1
                    let reason = oneLine("\(error)")
                    if failures == 1 { Log.warn("merging the write log into the table failed; retrying", ["error": reason]) }
                    lock.lock()
                    foldFailure = reason
                    lock.unlock()
                    lock.broadcast()
                    usleep(useconds_t(min(failures, 10) * 100_000))
                    continue
                }
                lock.lock()
                foldPending = false
                foldFailure = nil
                mergedGeneration = generation
                foldedSequence.store(through, ordering: .releasing)
                lock.unlock()
                lock.broadcast()
                continue
            }
            // Nothing being merged and rows waiting: ask for a flip.
            flipRequested = true
            lock.unlock()
            lock.broadcast()
        }
        do {
            try folder.foldAll()
            try writer.checkpoint()
        } catch {
            Log.warn("merging the write log at shutdown failed; the next start merges it", ["error": "\(error)"])
        }
    }

    /// Whether someone waits for the next fold: pins past half their limit (the writer will
    /// soon wait), a COUNT, RECENT, SCAN or STATS, a FLUSHALL, or the stop. Lock held.
    private var foldIsUrgent: Bool {
        2 * (pinnedBytes[0] + pinnedBytes[1]) >= pinLimitBytes || waitingBarriers > 0
            || flushRequest != nil || stopping || folderStopping
    }

    /// Publishes `foldIsUrgent` to a background fold; after any change to what it reads. Lock held.
    private func noteUrgency() {
        foldUrgent.store(foldIsUrgent, ordering: .relaxed)
    }

    /// Merges `generation` into the table range by range (see `WriteLogFolder`), and after
    /// each range's commit unpins its ids: a writer held back by the pin limit then waits for
    /// one range, not for the whole generation (once 12.7 s).
    private func fold(generation: Int, folder: any WriteLogFolder) throws {
        let started = monotonicNanos()
        nonisolated(unsafe) let folder = folder
        let ranges = try mergeStep { abandon in try folder.prepareFold(generation: generation, abandonIf: abandon) }
        let sorted = monotonicNanos()
        for _ in 0..<ranges {
            let range = try mergeStep { abandon in try folder.foldNextRange(abandonIf: abandon) }
            // Readers must not trust a snapshot from before this commit once entries go.
            publishedBatches.add(1, ordering: .releasing)
            var unpinned = 0
            range.forEachUserId { userId in
                switch cache.unpin(userId, generation: generation) {
                case .profile(let replyCount): unpinned += Self.pinnedBytes(replyCount: replyCount)
                case .absence: unpinned += Self.pinnedBytes(absenceOf: userId)
                case nil: break
                }
            }
            lock.lock()
            pinnedBytes[generation] = max(pinnedBytes[generation] - unpinned, 0)
            noteUrgency()
            lock.unlock()
            lock.broadcast()
        }
        if Log.level <= .debug {
            Log.debug("merged a write log generation", [
                "generation": "\(generation)", "ranges": "\(ranges)",
                "sort_ms": "\((sorted - started) / 1_000_000)", "ms": "\((monotonicNanos() - started) / 1_000_000)",
            ])
        }
    }

    /// What a VALUE line pinned in the cache counts against the pin limit: its bytes and
    /// about what the cache spends on an entry.
    private static func pinnedBytes(replyCount: Int) -> Int { replyCount + 32 }

    /// What a remembered removal of `userId` counts against the pin limit.
    private static func pinnedBytes(absenceOf userId: UnsafeRawBufferPointer) -> Int { userId.count + 16 }

    /// Runs one step of a merge on a thread of its own, named "merge", and returns its result.
    ///
    /// A step nobody waits for (`foldIsUrgent` is false) is background work: its thread moves
    /// to SCHED_IDLE, so it takes only CPU time the request path leaves (at nice 10 the folder
    /// still took a quarter of the cores from a SET storm), and the step is abandoned, having
    /// changed nothing, as soon as the merge becomes urgent; it then runs again at once,
    /// urgently, so that a waiting writer or client is never left behind a thread the
    /// scheduler starves. An urgent step keeps the folder's nice 10. Every step runs on such a
    /// thread, urgent or not: with glibc's arena per thread, folds on two long-lived threads
    /// spread SQLite's working memory over two arenas (3 to 6 bytes more per cached profile).
    /// Unpinning stays on the folder thread: at SCHED_IDLE it would hold shard locks that
    /// workers wait for while the scheduler starves it.
    private func mergeStep<R>(_ step: @escaping (_ abandonIf: @escaping () -> Bool) throws -> R) throws -> R {
        nonisolated(unsafe) let step = step
        while true {
            let urgent = foldUrgent.load(ordering: .relaxed)
            let outcome = MergeStepOutcome<R>()
            // `onThreadOfItsOwn`: only a thread made for this step may drop to SCHED_IDLE; done on
            // the folder thread it would stay there, and every later urgent step with it.
            let body: @Sendable (_ onThreadOfItsOwn: Bool) -> Void = { onThreadOfItsOwn in
                if !urgent && onThreadOfItsOwn && profiled_idle_this_thread() != 0
                    && !self.idleRefusalLogged.exchange(true, ordering: .relaxed) {
                    // Once: a system that refuses it (a seccomp filter, say) refuses every merge.
                    Log.warn("cannot move background merges to SCHED_IDLE; they run at nice 10",
                             ["error": String(cString: strerror(errno))])
                }
                outcome.result = Result { try step { !urgent && self.foldUrgent.load(ordering: .relaxed) } }
            }
            if let thread = tryStartThread("merge", { body(true) }) {
                pthread_join(thread, nil)
            } else {
                body(false)
            }
            switch outcome.result! {
            case .success(let value):
                return value
            case .failure(let error as StoreError) where error.kind == .interrupted && !urgent:
                // It became urgent while running in the background: run it again, now.
                Log.debug("abandoned a background merge step")
                continue
            case .failure(let error):
                throw error
            }
        }
    }

    /// Checked with the lock held.
    private var folderHasWork: Bool {
        if flushRequest != nil || foldPending { return true }
        if folderStopping && writerFinished { return true }
        // While nothing is being folded the other generation is empty: anything committed and
        // not folded is in the one being written.
        return foldingGeneration == nil && !flipRequested
            && committedSequence.load(ordering: .acquiring) != foldedSequence.load(ordering: .relaxed)
    }
}

/// What a merge step's thread hands back to the folder, which reads it after joining it.
private final class MergeStepOutcome<R>: @unchecked Sendable {
    var result: Result<R, any Error>?
}

/// Makes an error text safe to put on one protocol line.
func oneLine(_ text: String) -> String {
    String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
}
