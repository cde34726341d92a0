import ProfileTestSupport
import Glibc
@testable import ProfileServer
import Testing

/// The checkpointer thread keeps both write-ahead logs short; one that cannot be checkpointed
/// must not leave the other to grow.
@Suite struct CheckpointerTests {
    struct DiskFull: Error {}

    @Test func aFailingCheckpointDoesNotStopTheOthers() throws {
        let checkpointer = Checkpointer(intervalMilliseconds: 2)
        let failed = Locked(0)
        let done = Locked(0)
        let thread = startThread("checkpointer") {
            checkpointer.run([
                ("database", { failed.withLock { $0 += 1 }; throw DiskFull() }),
                ("write log", { done.withLock { $0 += 1 } }),
            ])
        }
        let deadline = monotonicSeconds() + 10
        while done.withLock({ $0 }) < 5 && monotonicSeconds() < deadline { usleep(2_000) }
        checkpointer.stop()
        pthread_join(thread, nil)
        #expect(failed.withLock { $0 } >= 5)
        #expect(done.withLock { $0 } >= 5)
    }
}
