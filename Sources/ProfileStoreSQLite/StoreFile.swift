import CSQLite
import Glibc
import ProfileStore
import Synchronization

/// The database file a store opened: its path and settings, the process-
/// exclusive lock on it, and the fault injected into its writers.
///
/// Every connection keeps it alive, so the lock is held until the store and
/// all of its readers and writers are gone.
///
/// Threading: thread-safe.
final class StoreFile: Sendable {
    let path: String
    let synchronous: SynchronousMode
    let busyTimeoutMilliseconds: Int32
    /// An open descriptor of `<path>.lock` holding flock(LOCK_EX). It is a
    /// sidecar because closing any descriptor of the database file itself
    /// would drop SQLite's POSIX locks on it.
    private let lockDescriptor: Int32
    /// Whether this open made `<path>.lock`, so a refused file can be left without it.
    private let createdLockFile: Bool
    /// The result code writers fail with, or SQLITE_OK (0) when none.
    private let injectedFault = Atomic<Int32>(0)
    /// The errno syncs of the write log fail with, or 0 when none.
    private let injectedSyncErrno = Atomic<Int32>(0)

    /// Makes the parent directories and takes the lock.
    ///
    /// - Throws: `.locked` when another process or store holds the file.
    init(path: String, synchronous: SynchronousMode, busyTimeoutMilliseconds: Int32) throws(StoreError) {
        self.path = path
        self.synchronous = synchronous
        self.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        try makeDirectories(parentOf: path, databasePath: path)
        let lockPath = Self.lockPath(of: path)
        // A store that stops cleanly removes its lock file while still holding the lock, so a
        // lock won on a file that is no longer at `lockPath` is no lock at all: open again.
        var attempts = 0
        while true {
            var descriptor = open(lockPath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            let created = descriptor >= 0
            if descriptor < 0 && errno == EEXIST {
                descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            }
            guard descriptor >= 0 else {
                throw cannotOpen("cannot open the lock file \(lockPath)", errno: errno, path: path)
            }
            // A lock just released can linger for a moment: a process being started elsewhere
            // holds a copy of every descriptor until its exec closes them. So a busy lock is
            // tried again for a quarter of a second before it counts as held.
            while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                let error = errno
                if error == EINTR { continue }
                if error == EWOULDBLOCK && attempts < 50 {
                    attempts += 1
                    usleep(5_000)
                    continue
                }
                close(descriptor)
                if error == EWOULDBLOCK {
                    throw StoreError(kind: .locked, resultCode: SQLITE_BUSY,
                                     message: "\(lockPath) is locked", path: path)
                }
                throw cannotOpen("cannot lock \(lockPath)", errno: error, path: path)
            }
            var held = stat(), named = stat()
            if fstat(descriptor, &held) == 0 && stat(lockPath, &named) == 0
                && held.st_dev == named.st_dev && held.st_ino == named.st_ino {
                lockDescriptor = descriptor
                createdLockFile = created
                // Only the lock's holder builds a new file (`OfflineStoreWriter`): one found now
                // is what a killed import left, never a store.
                unlink(Self.buildingPath(of: path))
                return
            }
            close(descriptor)
            attempts += 1
            guard attempts < 50 else {
                throw StoreError(kind: .locked, resultCode: SQLITE_BUSY,
                                 message: "\(lockPath) kept being replaced while it was being locked", path: path)
            }
        }
    }

    deinit {
        close(lockDescriptor)
    }

    /// Removes `<path>.lock` if this open made it; for a file the store refuses, which it
    /// leaves as it found it. The lock is still held, so no other store is using the name.
    func removeCreatedLockFile() {
        if createdLockFile { unlink(Self.lockPath(of: path)) }
    }

    /// Removes `<path>.lock` at the end of a clean run, while the lock is still held: nothing
    /// is left beside the store but the store. A store that opened the file before it went
    /// finds it gone once it wins the lock, and opens a new one.
    func removeLockFile() {
        unlink(Self.lockPath(of: path))
    }

    static func lockPath(of path: String) -> String { path + ".lock" }

    /// Where an offline import builds a new store before it takes the store's name.
    static func buildingPath(of path: String) -> String { path + ".building" }

    /// The database at `path` and every file the store keeps beside it: its WAL and
    /// shared-memory files, its lock, a new file an import is building, the write log's
    /// segments there are now, and the write log of earlier versions.
    static func paths(of path: String) -> [String] {
        [path, path + "-wal", path + "-shm", lockPath(of: path), buildingPath(of: path)]
            + WriteLogFile.segmentNumbers(of: path).map { WriteLogFile.segmentPath(of: path, number: $0) }
            + LegacyWriteLog.paths(of: path)
    }

    /// The result code writers should fail with, if one is injected.
    @inline(__always)
    var fault: Int32? {
        let code = injectedFault.load(ordering: .relaxed)
        return code == 0 ? nil : code
    }

    func setFault(_ code: Int32?) {
        injectedFault.store(code ?? 0, ordering: .relaxed)
    }

    /// The errno the write log's syncs should fail with, if one is injected.
    var syncFault: Int32? {
        let code = injectedSyncErrno.load(ordering: .relaxed)
        return code == 0 ? nil : code
    }

    func setSyncFault(errno code: Int32?) {
        injectedSyncErrno.store(code ?? 0, ordering: .relaxed)
    }
}

private func cannotOpen(_ what: String, errno error: Int32, path: String) -> StoreError {
    StoreError(kind: .other, resultCode: SQLITE_CANTOPEN,
               message: "\(what): \(String(cString: strerror(error)))", path: path)
}

/// The directory holding `path`.
func directoryPath(of path: String) -> String {
    guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
    return slash == path.utf8.startIndex ? "/" : String(Substring(path.utf8[..<slash]))
}

/// Makes the names in the directory holding `path` durable; 0, or the errno of what failed.
func syncDirectory(holding path: String) -> Int32 {
    let directory = open(directoryPath(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard directory >= 0 else { return errno }
    defer { close(directory) }
    return fsync(directory) == 0 ? 0 : errno
}

/// mkdir -p of the directory holding `path`, with mode 0755.
private func makeDirectories(parentOf path: String, databasePath: String) throws(StoreError) {
    guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")), slash != path.utf8.startIndex else { return }
    let parent = path.utf8[..<slash]
    var prefixes: [Substring.UTF8View.Index] = parent.indices.filter {
        parent[$0] == UInt8(ascii: "/") && $0 != parent.startIndex
    }
    prefixes.append(parent.endIndex)
    for end in prefixes {
        let directory = String(Substring(parent[..<end]))
        if mkdir(directory, 0o755) == 0 { continue }
        let error = errno
        var status = stat()
        if stat(directory, &status) == 0 && (status.st_mode & S_IFMT) == S_IFDIR { continue }
        throw cannotOpen("cannot create the directory \(directory)", errno: error, path: databasePath)
    }
}
