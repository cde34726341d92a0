import Glibc

/// Copies the write-ahead logs of the database and of the write log back into their files
/// on a thread of its own, a few times a second, so that the group-commit writer rarely has
/// to: a checkpoint of a large log takes seconds, and inside a commit it would hold every
/// write waiting.
///
/// `run` belongs to the checkpointer's thread; `stop` may be called from any thread.
final class Checkpointer: @unchecked Sendable {
    private let lock = ConditionLock()
    private var stopping = false
    private let intervalMilliseconds: Int

    init(intervalMilliseconds: Int = 200) {
        self.intervalMilliseconds = intervalMilliseconds
    }

    /// Runs every checkpoint each round until `stop`, each over a connection of its own used
    /// for nothing else: the database's, then the write log's. One that fails does not keep
    /// the others from running.
    func run(_ checkpoints: [(file: String, checkpoint: () throws -> Void)]) {
        var failures = Array(repeating: 0, count: checkpoints.count)
        while waitForNextRound() {
            for (i, (file, checkpoint)) in checkpoints.enumerated() {
                do {
                    try checkpoint()
                    failures[i] = 0
                } catch {
                    // The writers' own automatic checkpoints still bound the logs; say it once.
                    failures[i] += 1
                    if failures[i] == 1 { Log.warn("background checkpoint failed", ["file": file, "error": "\(error)"]) }
                }
            }
        }
    }

    func stop() {
        lock.lock()
        stopping = true
        lock.unlock()
        lock.signal()
    }

    /// Sleeps one interval; false once stopped.
    private func waitForNextRound() -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_nsec += intervalMilliseconds * 1_000_000
        deadline.tv_sec += deadline.tv_nsec / 1_000_000_000
        deadline.tv_nsec %= 1_000_000_000
        lock.lock()
        defer { lock.unlock() }
        if !stopping { lock.wait(until: deadline) }
        return !stopping
    }
}
