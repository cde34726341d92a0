import Glibc
import ProfileCache
import ProfileProtocol
import ProfileStore
import ProfileSystem

/// The single writer: group commit for every write the server accepts.
///
/// Workers queue write jobs; the writer thread takes everything queued, hands it to the
/// store's write path as one commit, puts each written profile's new reply line into the
/// cache (where it is cached already: a write does not push out what readers use), and only
/// then hands the answers back to the workers, so no connection can read anything older once
/// a reply is out. Writes that arrive while a commit runs wait together for the next one.
///
/// Workers call `submit` from their threads; `run` belongs to the writer thread.
final class WriteCoordinator: @unchecked Sendable {
    private let lock = ConditionLock()
    private var queue: [WriteJob] = []
    private var stopping = false

    private let cache: ProfileCache
    private let statistics: ServerStatistics
    private let writePath: any ProfileWritePath
    /// Encodes VALUE lines for the cache; writer thread only.
    private let scratch: UnsafeMutableRawPointer
    private let scratchCapacity = 65536
    /// The ids of a batch, for `ProfileCache.prefetch`; writer thread only.
    private var prefetchSlots: UnsafeMutableBufferPointer<PrefetchSlot>

    init(cache: ProfileCache, statistics: ServerStatistics, writePath: any ProfileWritePath) {
        self.cache = cache
        self.statistics = statistics
        self.writePath = writePath
        scratch = UnsafeMutableRawPointer.allocate(byteCount: scratchCapacity, alignment: 16)
        prefetchSlots = .allocate(capacity: 1024)
    }

    deinit {
        scratch.deallocate()
        prefetchSlots.deallocate()
    }

    /// Queues jobs; called by workers.
    func submit(_ jobs: [WriteJob]) {
        lock.lock()
        queue.append(contentsOf: jobs)
        lock.unlock()
        lock.signal()
    }

    /// Asks the writer to finish once the queue is empty.
    func stop() {
        lock.lock()
        stopping = true
        lock.unlock()
        lock.signal()
    }

    /// The writer thread's loop: returns after `stop` once every queued job is answered.
    func run() {
        var batch: [WriteJob] = []
        while true {
            lock.lock()
            while queue.isEmpty && !stopping { lock.wait() }
            if queue.isEmpty {
                lock.unlock()
                return
            }
            swap(&batch, &queue)
            lock.unlock()
            commit(batch)
            deliver(batch)
            batch.removeAll(keepingCapacity: true)
        }
    }

    /// Commits the batch and gives each job its outcome; the cache learns every change first.
    private func commit(_ batch: [WriteJob]) {
        prefetchCache(batch)
        let cache = self.cache
        writePath.commit(batch, knownProfile: { userId in
            cache.lookup(userId) { found in
                switch found {
                case .hit: .present(nil)
                case .absent: .absent
                case .miss: .unknown
                }
            }
        }, report: { index, result in
            let job = batch[index]
            switch result {
            case .failed(let error):
                Log.warn("write failed; nothing of it was committed", ["error": "\(error)"])
                job.outcome = .failed(error.reason)
            case .committed(let outcomes):
                publish(job, outcomes)
                job.outcome = Self.answer(job, outcomes)
                statistics.profilesWritten.add(job.profilesWritten, ordering: .relaxed)
                if case .deleted = job.outcome { statistics.profilesDeleted.add(1, ordering: .relaxed) }
            }
        })
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
                guard let userId = job.operation(at: index).userId else { continue }
                prefetchSlots[gathered] = PrefetchSlot(key: userId)
                gathered += 1
            }
        }
        cache.prefetch(UnsafeMutableBufferPointer(rebasing: prefetchSlots[0..<gathered]))
    }

    /// Puts what the job's operations left into the cache.
    private func publish(_ job: WriteJob, _ outcomes: WriteOutcomes) {
        if case .flushAll = job.operation {
            cache.removeAll()
            return
        }
        for index in 0..<job.operationCount where outcomes.changed(index) {
            guard let row = outcomes.after(index) else {
                cache.update(outcomes.userId(index), reply: nil)
                continue
            }
            let count = ReplyEncoder.writeValueLine(userId: row.userId, name: row.name, portraitUri: row.portraitUri,
                                                    to: scratch)
            cache.update(row.userId, reply: UnsafeRawBufferPointer(start: scratch, count: count))
        }
    }

    private static func answer(_ job: WriteJob, _ outcomes: WriteOutcomes) -> WriteJob.Outcome {
        switch job.operation {
        case .set: .stored
        case .mset(let triples): .storedCount(triples)
        case .update: outcomes.before(0).exists ? .updated : .notFound
        case .del: outcomes.before(0).exists ? .deleted : .notFound
        case .flushAll: .flushed
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
}

/// Makes an error text safe to put on one protocol line.
func oneLine(_ text: String) -> String {
    String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
}
