import CLibevent
import Glibc

/// Starts a joinable POSIX thread running `body`, named `name` (at most 15 bytes): `top -H`
/// and /proc/PID/task/*/comm then tell the writer from the workers.
func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t {
    guard let thread = tryStartThread(name, body) else { preconditionFailure("pthread_create failed: \(errno)") }
    return thread
}

/// `startThread`, or nil when the system cannot make another thread now.
func tryStartThread(_ name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t? {
    precondition(name.utf8.count <= 15, "a thread name is at most 15 bytes")
    final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(_ name: String, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }
    let start = Unmanaged.passRetained(Start(name, body))
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { raw in
        let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
        // Named by itself before it does anything, so nothing ever sees it under its parent's name.
        _ = pthread_setname_np(pthread_self(), start.name)
        start.body()
        return nil
    }, start.toOpaque())
    guard rc == 0 else {
        start.release()
        errno = rc
        return nil
    }
    return thread
}

/// A mutex with one condition variable, for the writer's queue and its hand-offs with the folder.
///
/// Thread-safe: that is its purpose. The pthread objects live in memory this object owns.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    /// Waits for a signal; call with the lock held.
    func wait() { pthread_cond_wait(condition, mutex) }
    func signal() { pthread_cond_signal(condition) }
    /// Wakes every waiter: for a lock two threads wait on, each for its own reason.
    func broadcast() { pthread_cond_broadcast(condition) }
    /// Waits for a signal or the wall-clock deadline; call with the lock held.
    func wait(until deadline: timespec) {
        var deadline = deadline
        _ = pthread_cond_timedwait(condition, mutex, &deadline)
    }
}
