import CSQLite
import Glibc
import ProfileStore
import Synchronization

/// How hard a commit waits for the disk.
///
/// Threading: a plain value; any thread.
public enum SynchronousMode: Sendable {
    /// Commits are durable across a process crash; an OS crash or power loss may lose about
    /// the last second of them (the write log is synced once a second, see `LogSyncer`).
    case normal
    /// Every commit is synced to disk before it returns.
    case full
}

/// A store in one SQLite file in WAL mode, with its write log beside it (`<path>-log.<n>`,
/// see `WriteLogFile`) and the writes not yet merged into the table in memory
/// (`WriteBuffer`).
///
/// Opening validates the file, creates it (and its parent directories) on first use, takes a
/// process-exclusive lock on it that lasts until the store and all of its readers and writers
/// are gone, and merges into the table whatever writes a crash left in the log.
///
/// Threading: thread-safe. Any thread may make readers and writers; each of those then
/// belongs to one thread at a time.
public final class SQLiteProfileStore: LocalProfileStore {
    /// Rows a merge writes per transaction unless told otherwise: a range takes a fraction of
    /// a second, so an abandoned one loses little, and a FLUSHALL or a stop waits little.
    static let defaultRowsPerMergeRange = 4_096

    let file: StoreFile
    private let buffer: WriteBuffer
    private let writerCacheKibibytes: Int
    private let writePathOpened = Atomic<Bool>(false)

    /// Opens the store at `path`.
    ///
    /// - Parameters:
    ///   - path: The database file; a missing or empty file becomes a new store.
    ///   - synchronous: How hard commits wait for the disk.
    ///   - busyTimeoutMilliseconds: How long a connection waits for a lock before failing with
    ///     `.busy`, and a write for room in a full write buffer.
    ///   - writerCacheMebibytes: the most page cache each writer keeps. Large import
    ///     transactions want it large; a server, whose merges write in ranges, keeps memory for
    ///     its own cache.
    ///   - writeBufferBytes: how much memory committed writes may take before they are merged
    ///     into the table (see `ProfileWritePath.commit` for what happens near it).
    /// - Throws: `.locked` while another store holds the file; `.notADatabase`,
    ///   `.newerSchema` or `.corrupt` for a file it will not use, which it leaves
    ///   untouched; otherwise what SQLite or the system reports.
    public convenience init(path: String, synchronous: SynchronousMode = .normal, busyTimeoutMilliseconds: Int32 = 5000,
                writerCacheMebibytes: Int = 256, writeBufferBytes: Int = 256 << 20) throws(StoreError) {
        try self.init(file: StoreFile(path: path, synchronous: synchronous, busyTimeoutMilliseconds: busyTimeoutMilliseconds),
                      writerCacheMebibytes: writerCacheMebibytes, writeBufferBytes: writeBufferBytes)
    }

    /// Opens the store in `file`, whose lock the caller took.
    init(file: StoreFile, writerCacheMebibytes: Int, writeBufferBytes: Int = 256 << 20) throws(StoreError) {
        self.file = file
        writerCacheKibibytes = writerCacheMebibytes * 1024
        buffer = WriteBuffer(limitBytes: writeBufferBytes)
        do {
            try Schema.prepare(file)
        } catch {
            // Not ours: leave nothing of the store beside it.
            if error.kind == .notADatabase { file.removeCreatedLockFile() }
            throw error
        }
        try LegacyWriteLog.mergeIfPresent(file)
        try recover()
    }

    /// Writes a server committed to the log but did not merge before it stopped (a crash) go
    /// into the table now, before anyone reads or writes the table directly; then the log's
    /// segments go.
    private func recover() throws(StoreError) {
        let connection = try Connection(file: file)
        let mergedThrough = try Merger.mergedThrough(connection)
        let merger = try Merger(file: file, buffer: buffer, log: nil, cacheKibibytes: writerCacheKibibytes) { _, _ in }
        let buffer = self.buffer
        let replayed = try WriteLogReader.replay(file, mergedThrough: mergedThrough) { (record) throws(StoreError) in
            if buffer.replay(record) { try merger.mergeEverything() }
        }
        try merger.mergeEverything()
        for number in replayed.segments { unlink(WriteLogFile.segmentPath(of: file.path, number: number)) }
    }

    /// Removes the `.lock` file beside the store at the end of a clean run of an offline tool
    /// (after an import's last checkpoint, or an export's last read); the lock itself is held
    /// until the store is gone. A write path removes it when it closes cleanly.
    public func removeLockFile() {
        file.removeLockFile()
    }

    public func makeReader() throws -> any ProfileReader {
        try SQLiteProfileReader(file: file, buffer: buffer)
    }

    /// The table's writer, for `OfflineStoreWriter` (and tests). Not while a write path is
    /// open: it writes the table directly, past the write buffer.
    func makeWriter() throws(StoreError) -> SQLiteProfileWriter {
        precondition(!writePathOpened.load(ordering: .relaxed), "a table writer beside the write path")
        return try SQLiteProfileWriter(file: file, cacheKibibytes: writerCacheKibibytes)
    }

    public func openWritePath() throws -> any ProfileWritePath {
        try openWritePath { _, _ in }
    }

    /// The write path, telling `warn` what goes wrong in the background (a merge that fails).
    public func openWritePath(warn: @escaping @Sendable (_ message: String, _ error: String) -> Void) throws
        -> any ProfileWritePath {
        try openWritePath(rowsPerMergeRange: Self.defaultRowsPerMergeRange, warn: warn)
    }

    /// The write path with merges of `rowsPerMergeRange` rows per transaction: tests make
    /// ranges small, so that a merge takes many of them.
    func openWritePath(rowsPerMergeRange: Int,
                       warn: @escaping @Sendable (_ message: String, _ error: String) -> Void) throws
        -> any ProfileWritePath {
        precondition(!writePathOpened.exchange(true, ordering: .relaxed), "a second write path for one store")
        let connection = try Connection(file: file)
        let rows = Int(try connection.integer("SELECT count(*) FROM profiles"))
        let newest = try connection.integer(RecencyTable.newestSequenceSQL)
        let log = WriteLogWriter(file: file, firstNumber: (WriteLogFile.segmentNumbers(of: file.path).last ?? 0) + 1)
        let merger = try Merger(file: file, buffer: buffer, log: log, cacheKibibytes: writerCacheKibibytes,
                                rowsPerRange: rowsPerMergeRange, warn: warn)
        return SQLiteWritePath(file: file, buffer: buffer, log: log, merger: merger,
                               reader: try SQLiteProfileReader(file: file, buffer: buffer),
                               nextSequence: newest + 1, rows: rows)
    }

    public var description: String { file.path }

    public var kindName: StaticString { "sqlite" }

    /// A file of this server's own is always within reach; failures show as write refusals.
    public var unreachableReason: String? { nil }

    /// For tests: makes every later write of this store (its log appends, its merges, its
    /// table writers) fail with the SQLite result code `code` (e.g. SQLITE_FULL, SQLITE_IOERR)
    /// until it is set back to nil. Readers are not affected. Any thread may call it.
    @_spi(Testing) public func setFault(_ code: Int32?) {
        file.setFault(code)
    }

    /// Makes the write log's background syncs fail with `code` (an errno) instead of syncing.
    @_spi(Testing) public func setSyncFault(errno code: Int32?) {
        file.setSyncFault(errno: code)
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
