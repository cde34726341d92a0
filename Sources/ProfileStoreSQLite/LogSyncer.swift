import Glibc
import ProfileStore
import ProfileSystem
import Synchronization

/// Under `--sync normal`, flushes the write log to disk once a second, as Redis does with
/// `appendfsync everysec`: an OS crash or power loss loses at most about the last second of
/// acknowledged writes, and no commit ever waits for the disk.
///
/// It syncs duplicates of the segments' descriptors, so the writer may close a segment (and
/// the merger remove it) at any time; a closed segment is synced once more, then let go.
///
/// A sync that fails is not retried: Linux may already have dropped the pages it could not
/// write, so a later sync that succeeds would prove nothing. The failure stays (`failure`),
/// and the writer refuses to append past it until the process restarts and replays the log.
///
/// Threading: `follow`, `failure`, `syncs` and `stop` from any thread; the syncing runs on a
/// thread of its own.
final class LogSyncer: @unchecked Sendable {
    static let intervalNanoseconds = 1_000_000_000

    private let file: StoreFile
    private let lock = ConditionLock()
    /// Descriptors (duplicates) of segments written since the last sync, oldest first; the
    /// last is the current segment. Under `lock`.
    private var segments: [Int32] = []
    /// A segment began since the last sync, so the directory's entry for it must be synced too.
    private var segmentBegan = false
    private var stopping = false
    /// Whether a frame was appended since the last sync.
    private let appended = Atomic<Bool>(false)
    private var thread: pthread_t?
    /// The errno of the sync that failed, or 0.
    private let failedErrno = Atomic<Int32>(0)
    /// Syncs that completed, for STATS.
    let completedSyncs = Atomic<Int>(0)

    init(file: StoreFile) {
        self.file = file
    }

    deinit {
        for descriptor in segments { close(descriptor) }
    }

    /// Starts the syncing thread.
    func start() {
        thread = startThread("log-sync") { [self] in run() }
    }

    /// The errno of the failed sync, if one failed.
    var failure: Int32? {
        let code = failedErrno.load(ordering: .relaxed)
        return code == 0 ? nil : code
    }

    /// Takes over `descriptor` (a duplicate of a new segment's): synced from now on, and
    /// closed once a newer segment has replaced it and it has been synced a last time.
    func follow(_ descriptor: Int32) {
        lock.lock()
        segments.append(descriptor)
        segmentBegan = true
        lock.unlock()
    }

    /// Notes a frame appended to the current segment.
    @inline(__always)
    func noteAppend() { appended.store(true, ordering: .relaxed) }

    /// Syncs what is left once more and stops the thread.
    func stop() {
        lock.lock()
        stopping = true
        lock.signal()
        lock.unlock()
        if let thread { pthread_join(thread, nil) }
        thread = nil
        syncOnce()
    }

    private func run() {
        lock.lock()
        while !stopping {
            lock.wait(forNanos: Self.intervalNanoseconds)
            if stopping { break }
            lock.unlock()
            syncOnce()
            lock.lock()
        }
        lock.unlock()
    }

    private func syncOnce() {
        lock.lock()
        let pending = segments
        let syncsDirectory = segmentBegan
        segmentBegan = false
        // All but the current segment are closed by the writer: each is synced this last time.
        segments = pending.suffix(1)
        lock.unlock()
        let dirty = appended.exchange(false, ordering: .relaxed) || syncsDirectory || pending.count > 1
        guard dirty else { return }
        guard failure == nil else {
            for descriptor in pending.dropLast() { close(descriptor) }
            return
        }
        var error: Int32 = 0
        for descriptor in pending where error == 0 {
            if let injected = file.syncFault {
                error = injected
            } else if fdatasync(descriptor) != 0 {
                error = errno
            }
        }
        if error == 0 && syncsDirectory {
            error = syncDirectory(holding: file.path)
        }
        for descriptor in pending.dropLast() { close(descriptor) }
        if error != 0 {
            failedErrno.store(error, ordering: .relaxed)
        } else {
            completedSyncs.add(1, ordering: .relaxed)
        }
    }
}
