import Glibc
import ProfileStore

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

    /// Checkpoints until `stop`; `writer` and `log` have connections of their own, used for
    /// nothing else.
    func run(writer: any ProfileWriter, log: any WriteLogCheckpointer) {
        var failures = 0
        while waitForNextRound() {
            do {
                try writer.checkpointWithoutWaiting()
                try log.checkpointWithoutWaiting()
                failures = 0
            } catch {
                // The writers' own automatic checkpoints still bound the logs; say it once.
                failures += 1
                if failures == 1 { Log.warn("background checkpoint failed", ["error": "\(error)"]) }
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
