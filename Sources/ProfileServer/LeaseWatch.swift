import Glibc
import ProfileStore
import ProfileSystem
import Synchronization

/// Keeps client caches within a shared store's lease: when the node's cache stops being
/// vouched for (no heartbeat came back in time: the listener's connection is lost, hung, or
/// PostgreSQL is down), every tracking client is told to drop everything at once, and again
/// every lease while it stays so, since what it read meanwhile came from PostgreSQL with no
/// invalidation to follow it. A client cache then holds nothing older than the lease plus
/// this watch's tick (a tenth of the lease, at least 5 ms), whatever failed.
///
/// Threading: `run` on a thread of its own; `stop` from any thread.
final class LeaseWatch: Sendable {
    private let store: any SharedProfileStore
    private let changes: any ChangeFeed
    private let stopping = Atomic<Bool>(false)

    init(store: any SharedProfileStore, changes: any ChangeFeed) {
        self.store = store
        self.changes = changes
    }

    func run() {
        let lease = store.leaseNanoseconds
        let tick = max(5_000_000, lease / 10)
        var vouched = store.cacheMayAnswer(at: monotonicNanos())
        var lastFlush = 0
        while !stopping.load(ordering: .relaxed) {
            usleep(useconds_t(tick / 1000))
            let now = monotonicNanos()
            let nowVouched = store.cacheMayAnswer(at: now)
            if !nowVouched && (vouched || now - lastFlush >= lease) {
                changes.flushAll(notices: nil)
                lastFlush = now
            }
            vouched = nowVouched
        }
    }

    func stop() { stopping.store(true, ordering: .relaxed) }
}
