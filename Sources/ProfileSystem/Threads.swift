import CLinux
import Glibc

/// Starts a joinable POSIX thread running `body`, named `name` (at most 15 bytes): `top -H`
/// and /proc/PID/task/*/comm then tell the writer from the workers.
public func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t {
    guard let thread = tryStartThread(name, body) else { preconditionFailure("pthread_create failed: \(errno)") }
    return thread
}

/// `startThread`, or nil when the system cannot make another thread now.
public func tryStartThread(_ name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t? {
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

/// A mutex with one condition variable: a queue and the threads that wait on it.
///
/// Thread-safe: that is its purpose. The pthread objects live in memory this object owns.
public final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    /// Runs `body` with the lock held.
    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }
    /// Takes the lock if nobody holds it; returns whether it did.
    public func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// Waits for a signal; call with the lock held.
    public func wait() { pthread_cond_wait(condition, mutex) }
    public func signal() { pthread_cond_signal(condition) }
    /// Wakes every waiter: for a lock two threads wait on, each for its own reason.
    public func broadcast() { pthread_cond_broadcast(condition) }
    /// Waits for a signal or until `nanos` have passed; call with the lock held.
    public func wait(forNanos nanos: Int) {
        // pthread condition variables time out by the wall clock.
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_nsec += nanos % 1_000_000_000
        deadline.tv_sec += nanos / 1_000_000_000 + deadline.tv_nsec / 1_000_000_000
        deadline.tv_nsec %= 1_000_000_000
        _ = pthread_cond_timedwait(condition, mutex, &deadline)
    }
}

/// Monotonic time in nanoseconds.
@inline(__always)
public func monotonicNanos() -> Int {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec * 1_000_000_000 + now.tv_nsec
}
