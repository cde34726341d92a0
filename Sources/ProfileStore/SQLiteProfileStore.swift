import CSQLite
import Glibc

/// How hard a commit waits for the disk.
///
/// Threading: a plain value; any thread.
public enum SynchronousMode: Sendable {
    /// Commits are durable across a process crash; an OS crash or power loss
    /// may lose the last ones (the log is synced at checkpoints).
    case normal
    /// Every commit is synced to disk before it returns.
    case full
}

/// A store in one SQLite file in WAL mode, with its write log beside it (`<path>-writes`,
/// see `WriteLogFile`).
///
/// Opening validates the file, creates it (and its parent directories) on
/// first use, and takes a process-exclusive lock on it that lasts until the
/// store and all of its readers and writers are gone.
///
/// Threading: thread-safe. Any thread may make readers and writers; each of
/// those then belongs to one thread at a time.
public final class SQLiteProfileStore: ProfileStore {
    /// PRAGMA user_version of a file this build writes.
    public static let schemaVersion: Int32 = Schema.version

    let file: StoreFile

    /// Opens the store at `path`.
    ///
    /// - Parameters:
    ///   - path: The database file; a missing or empty file becomes a new store.
    ///   - synchronous: How hard commits wait for the disk.
    ///   - busyTimeoutMilliseconds: How long a connection waits for a lock
    ///     before failing with `.busy`.
    /// - Throws: `.locked` while another store holds the file; `.notADatabase`,
    ///   `.newerSchema` or `.corrupt` for a file it will not use, which it leaves
    ///   untouched; otherwise what SQLite or the system reports.
    ///   - writerCacheMebibytes: the most page cache each writer keeps. Large import
    ///     transactions want it large; a server, whose commits are small, keeps memory for
    ///     its own cache.
    public init(path: String, synchronous: SynchronousMode = .normal,
                busyTimeoutMilliseconds: Int32 = 5000, writerCacheMebibytes: Int = 256) throws(StoreError) {
        file = try StoreFile(path: path, synchronous: synchronous, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        writerCacheKibibytes = writerCacheMebibytes * 1024
        do {
            try Schema.prepare(file)
        } catch {
            // Not ours: leave nothing of the store beside it.
            if error.kind == .notADatabase { file.removeCreatedLockFile() }
            throw error
        }
        try WriteLogFile.prepare(file)
        // Writes a server committed to the log but did not merge before it stopped (a crash)
        // go into the table now, before anyone reads or writes the table directly.
        let folder = try SQLiteWriteLogFolder(file: file, cacheKibibytes: writerCacheKibibytes,
                                              rowsPerRange: Self.defaultRowsPerFoldRange)
        if try folder.logRows() > 0 {
            try folder.foldAll()
        }
    }

    private let writerCacheKibibytes: Int

    public func makeReader() throws -> any ProfileReader {
        try SQLiteProfileReader(file: file)
    }

    public func makeWriter() throws -> any ProfileWriter {
        try SQLiteProfileWriter(file: file, cacheKibibytes: writerCacheKibibytes)
    }

    public func makeWriteLogWriter() throws -> any WriteLogWriter {
        try SQLiteWriteLogWriter(file: file)
    }

    public func makeWriteLogFolder(rowsPerRange: Int) throws -> any WriteLogFolder {
        try SQLiteWriteLogFolder(file: file, cacheKibibytes: writerCacheKibibytes, rowsPerRange: rowsPerRange)
    }

    public func makeWriteLogCheckpointer() throws -> any WriteLogCheckpointer {
        try SQLiteWriteLogCheckpointer(file: file)
    }

    public var description: String { file.path }

    /// For tests: makes every later operation of this store's writers fail
    /// with the SQLite result code `code` (e.g. SQLITE_FULL, SQLITE_IOERR)
    /// until it is set back to nil. The transaction in progress rolls back.
    /// Readers are not affected. Any thread may call it.
    public func setFault(_ code: Int32?) {
        file.setFault(code)
    }

    /// The store file at `path` and every file the store keeps beside it (write log, WALs, lock).
    public static func files(at path: String) -> [String] { StoreFile.paths(of: path) }

    /// Where the database lives when no `--db PATH` is given, first match wins:
    /// `$CACHE_DIRECTORY/profiles.sqlite3` (set by systemd's CacheDirectory=;
    /// the first entry when it lists several), then
    /// `$XDG_CACHE_HOME/profiled/profiles.sqlite3` (when absolute), then
    /// `$HOME/.cache/profiled/profiles.sqlite3`, and when even HOME is unset,
    /// `profiles.sqlite3` in the working directory. Empty variables count as unset.
    ///
    /// - Parameter environment: Looks a variable up; the process environment by default.
    public static func defaultPath(
        environment: (String) -> String? = { name in getenv(name).map { String(cString: $0) } }
    ) -> String {
        func variable(_ name: String) -> String? {
            guard let value = environment(name), !value.isEmpty else { return nil }
            return value
        }
        func joined(_ directory: String, _ rest: String) -> String {
            directory.hasSuffix("/") ? directory + rest : directory + "/" + rest
        }
        if let directories = variable("CACHE_DIRECTORY"),
           let first = directories.split(separator: ":").first {
            return joined(String(first), "profiles.sqlite3")
        }
        if let cache = variable("XDG_CACHE_HOME"), cache.hasPrefix("/") {
            return joined(cache, "profiled/profiles.sqlite3")
        }
        if let home = variable("HOME") {
            return joined(home, ".cache/profiled/profiles.sqlite3")
        }
        return "profiles.sqlite3"
    }
}
