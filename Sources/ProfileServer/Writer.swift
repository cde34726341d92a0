import Glibc
import ProfileCache
import ProfileProtocol
import ProfileStore
import Synchronization

/// The single writer: group commit for every write the server accepts.
///
/// Workers call `submit` from their threads; everything else runs on the writer's own thread.
/// Writes that arrive while a commit is running wait together and go into the next
/// transaction; each is answered only after that transaction committed and the cache holds
/// the new value, so no connection can read anything older once the reply is out.
final class WriteCoordinator: @unchecked Sendable {
    private let lock = ConditionLock()
    private var queue: [WriteJob] = []
    private var stopping = false
    private let store: any ProfileStore
    private let cache: ProfileCache
    private let statistics: ServerStatistics
    /// Encodes VALUE lines for the cache; used on the writer thread only.
    private let scratch: UnsafeMutableRawPointer
    private let scratchCapacity = 65536
    /// Counts batches published: bumped after a commit's values are in the cache and before
    /// anyone is answered. A reader whose snapshot began before a bump may hold older values,
    /// so it must not put them into the cache.
    let publishedBatches = Atomic<Int>(0)

    init(store: any ProfileStore, cache: ProfileCache, statistics: ServerStatistics) {
        self.store = store
        self.cache = cache
        self.statistics = statistics
        scratch = UnsafeMutableRawPointer.allocate(byteCount: scratchCapacity, alignment: 16)
    }

    deinit { scratch.deallocate() }

    /// Queues jobs; called by workers.
    func submit(_ jobs: [WriteJob]) {
        lock.lock()
        queue.append(contentsOf: jobs)
        lock.unlock()
        lock.signal()
    }

    /// Asks the loop to finish once the queue is empty.
    func stop() {
        lock.lock()
        stopping = true
        lock.unlock()
        lock.signal()
    }

    /// The writer thread's loop: returns after `stop` once every queued job is answered,
    /// with the WAL checkpointed.
    func run(writer: any ProfileWriter) {
        var batch: [WriteJob] = []
        while true {
            lock.lock()
            while queue.isEmpty && !stopping { lock.wait() }
            if queue.isEmpty && stopping {
                lock.unlock()
                break
            }
            swap(&batch, &queue)
            lock.unlock()

            commit(batch, writer: writer)
            deliver(batch)
            batch.removeAll(keepingCapacity: true)
        }
        do {
            try writer.checkpoint()
        } catch {
            Log.warn("checkpoint failed at shutdown", ["error": "\(error)"])
        }
    }

    /// Commits the batch in one transaction. If that fails, every job in it is answered
    /// ERROR STORE and none of them changed anything: what fails a commit here (a full disk,
    /// an I/O error, a lock held past the busy timeout) fails any smaller commit too.
    private func commit(_ batch: [WriteJob], writer: any ProfileWriter) {
        do {
            try writer.transaction {
                for job in batch { try apply(job, writer: writer) }
            }
            for job in batch { publish(job) }
            publishedBatches.add(1, ordering: .releasing)
        } catch {
            let reason = oneLine("\(error)")
            Log.warn("write failed; nothing of it was committed", ["jobs": "\(batch.count)", "error": reason])
            for job in batch { job.outcome = .failed(reason) }
        }
    }

    /// Executes one job inside the open transaction; sets its tentative outcome.
    private func apply(_ job: WriteJob, writer: any ProfileWriter) throws {
        job.updatedReply.removeAll()
        try job.withArguments { argument in
            switch job.operation {
            case .set:
                try writer.upsert(userId: argument(0), name: argument(1), portraitUri: argument(2))
                job.outcome = .stored
            case .mset(let triples):
                for t in 0..<triples {
                    try writer.upsert(userId: argument(3 * t), name: argument(3 * t + 1), portraitUri: argument(3 * t + 2))
                }
                job.outcome = .storedCount(triples)
            case .update(let hasName, let hasPortraitUri):
                var next = 1
                let name: UnsafeRawBufferPointer? = hasName ? argument(next) : nil
                if hasName { next += 1 }
                let portraitUri: UnsafeRawBufferPointer? = hasPortraitUri ? argument(next) : nil
                job.outcome = .notFound
                try writer.update(userId: argument(0), name: name, portraitUri: portraitUri) { row in
                    guard let row else { return }
                    let count = ReplyEncoder.valueLineCount(userId: row.userId, name: row.name, portraitUri: row.portraitUri)
                    job.updatedReply = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                        initialized = ReplyEncoder.writeValueLine(userId: row.userId, name: row.name,
                                                                  portraitUri: row.portraitUri, to: buffer.baseAddress!)
                    }
                    job.outcome = .updated
                }
            case .del:
                job.outcome = try writer.delete(userId: argument(0)) ? .deleted : .notFound
            case .flushAll:
                try writer.deleteAll()
                job.outcome = .flushed
            }
        }
    }

    /// After commit: make the cache authoritative for what the job wrote, and count it.
    private func publish(_ job: WriteJob) {
        job.withArguments { argument in
            switch (job.operation, job.outcome) {
            case (.set, _):
                cacheValue(userId: argument(0), name: argument(1), portraitUri: argument(2))
            case (.mset(let triples), _):
                for t in 0..<triples {
                    cacheValue(userId: argument(3 * t), name: argument(3 * t + 1), portraitUri: argument(3 * t + 2))
                }
            case (.update, .updated):
                job.updatedReply.withUnsafeBytes { cache.store(argument(0), reply: $0) }
            case (.del, .deleted):
                cache.store(argument(0), reply: nil)
                statistics.profilesDeleted.add(1, ordering: .relaxed)
            case (.flushAll, _):
                cache.removeAll()
            default:
                break
            }
        }
        let written = job.profilesWritten
        if written > 0 { statistics.profilesWritten.add(written, ordering: .relaxed) }
    }

    private func cacheValue(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        let count = ReplyEncoder.writeValueLine(userId: userId, name: name, portraitUri: portraitUri, to: scratch)
        cache.store(userId, reply: UnsafeRawBufferPointer(start: scratch, count: count))
    }

    /// Hands answered jobs back to the workers that own their connections, in order.
    private func deliver(_ batch: [WriteJob]) {
        var byWorker: [(worker: Worker, jobs: [WriteJob])] = []
        for job in batch {
            let worker = job.connection.worker
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
