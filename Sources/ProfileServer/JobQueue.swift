import ProfileSystem

/// Jobs the workers hand to threads that take them in batches: the writers, which commit all
/// they take together, and the fetchers, which read all they take in one round trip.
///
/// Threading: `submit` and `stop` from any thread; `take` from the consuming threads.
final class JobQueue<Job>: @unchecked Sendable {
    private let lock = ConditionLock()
    private var queue: [Job] = []
    private var stopping = false

    /// Queues jobs; called by workers.
    func submit(_ jobs: [Job]) {
        lock.lock()
        queue.append(contentsOf: jobs)
        lock.unlock()
        lock.signal()
    }

    /// Lets every consumer finish once the queue is empty.
    func stop() {
        lock.lock()
        stopping = true
        lock.unlock()
        lock.broadcast()
    }

    /// Waits for jobs and moves every queued one into `batch`, which it empties first; false
    /// once `stop` was called and nothing is left.
    func take(into batch: inout [Job]) -> Bool {
        batch.removeAll(keepingCapacity: true)
        lock.lock()
        defer { lock.unlock() }
        while queue.isEmpty && !stopping { lock.wait() }
        if queue.isEmpty { return false }
        swap(&batch, &queue)
        return true
    }

    /// Waits until jobs are queued, without taking them; false once `stop` was called and
    /// nothing is left.
    func waitForJobs() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        while queue.isEmpty && !stopping { lock.wait() }
        return !queue.isEmpty
    }

    /// Moves every queued job into `batch`, which it empties first, without waiting (none may
    /// be queued), unless more than `limit` are queued: then it takes none and returns false.
    func takeQueued(into batch: inout [Job], atMost limit: Int = .max) -> Bool {
        batch.removeAll(keepingCapacity: true)
        lock.lock()
        defer { lock.unlock() }
        guard queue.count <= limit else { return false }
        swap(&batch, &queue)
        return true
    }
}

/// Posts answered jobs back to the workers that took them, each worker's in one message, in
/// their order.
func post<Job>(_ jobs: [Job], worker: (Job) -> Worker, as message: ([Job]) -> WorkerMessage) {
    var byWorker: [(worker: Worker, jobs: [Job])] = []
    for job in jobs {
        let owner = worker(job)
        if let i = byWorker.firstIndex(where: { $0.worker === owner }) {
            byWorker[i].jobs.append(job)
        } else {
            byWorker.append((owner, [job]))
        }
    }
    for (owner, jobs) in byWorker { owner.post(message(jobs)) }
}
