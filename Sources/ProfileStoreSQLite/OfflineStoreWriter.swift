import CSQLite
import Glibc
import ProfileStore

/// The table writer of an offline tool (`profilectl import --db`), which holds the store's
/// lock for as long as it lives.
///
/// Into a store that exists it writes with the store's table writer. Where there is
/// no store yet, the first transaction builds the file under another name (`<path>.building`)
/// with no rollback journal and no syncs: nothing can read the file before it is whole, so the
/// journal would only write every page twice (the WAL, then its checkpoint). Once the
/// transaction commits, the file is switched to WAL, synced, given the store's name with a link
/// that fails rather than replace anything, and the directory is synced. A failure or a kill
/// before then leaves no store at all, as the transaction had never begun; the next holder of
/// the lock removes the unfinished file. Later transactions open the store that was built.
///
/// Threading: one thread at a time.
public final class OfflineStoreWriter: ProfileWriter {
    let file: StoreFile
    private let cacheMebibytes: Int
    private enum Phase {
        /// The first transaction will build a new file.
        case building
        /// The first transaction is building it with this writer.
        case buildingWith(SQLiteProfileWriter)
        /// The file is built; the store is opened when a later transaction needs it.
        case built
        case store(SQLiteProfileStore, SQLiteProfileWriter)
    }
    private var phase: Phase

    /// Opens the store at `path`, or prepares to build one there.
    ///
    /// - Throws: as `SQLiteProfileStore.init`.
    public init(path: String, cacheMebibytes: Int) throws(StoreError) {
        file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 5000)
        self.cacheMebibytes = cacheMebibytes
        // Under the lock: nothing of a store there means nothing can appear but by this writer.
        let isNew = StoreFile.paths(of: path).allSatisfy { other in
            other == StoreFile.lockPath(of: path) || access(other, F_OK) != 0
        }
        if isNew {
            phase = .building
        } else {
            phase = try Self.opened(file, cacheMebibytes: cacheMebibytes)
        }
    }

    deinit {
        // No store was made: nothing is left beside the name either.
        if case .building = phase { file.removeLockFile() }
    }

    /// The store in `file` and its table writer.
    private static func opened(_ file: StoreFile, cacheMebibytes: Int) throws(StoreError) -> Phase {
        let store = try SQLiteProfileStore(file: file, writerCacheMebibytes: cacheMebibytes)
        return .store(store, try store.makeWriter())
    }

    /// Whether the next transaction builds a new file.
    var buildsNewFile: Bool {
        if case .building = phase { return true }
        return false
    }

    public func transaction<R>(_ body: () throws -> R) throws -> R {
        switch phase {
        case .store(_, let writer), .buildingWith(let writer):
            // Within the build, as `ProfileWriter.transaction` is not reentrant.
            return try writer.transaction(body)
        case .built:
            phase = try Self.opened(file, cacheMebibytes: cacheMebibytes)
            return try transaction(body)
        case .building:
            let building = StoreFile.buildingPath(of: file.path)
            do {
                let result = try build(at: building, body)
                try publish(building)
                phase = .built
                return result
            } catch {
                phase = .building
                unlink(building)
                throw error
            }
        }
    }

    /// Runs the first transaction into a new file at `building`, left in WAL mode and closed.
    private func build<R>(at building: String, _ body: () throws -> R) throws -> R {
        let connection = try Connection(file: file, path: building, create: true)
        // All before the first write: the schema goes in without a journal or syncs too.
        let mode = try connection.text("PRAGMA journal_mode = OFF")
        guard mode == "off" else {
            throw StoreError(kind: .other, resultCode: SQLITE_ERROR,
                             message: "a new file cannot be built without a journal (journal mode stayed \(mode))",
                             path: file.path)
        }
        try SQLiteProfileWriter.configureForLargeTransactions(connection, cacheKibibytes: cacheMebibytes * 1024)
        try connection.execute("PRAGMA synchronous = OFF")
        try Schema.migrate(connection, from: 0)
        let writer = try SQLiteProfileWriter(connection: connection)
        phase = .buildingWith(writer)
        let result = try writer.transaction(body)
        phase = .building
        try connection.useWriteAheadLogging(for: "the new file")
        return result
    }

    /// Gives the built file the store's name, durably: its pages, then the name.
    private func publish(_ building: String) throws(StoreError) {
        try sync(building, what: "the new file")
        guard link(building, file.path) == 0 else {
            let error = errno
            throw failure(error == EEXIST ? "\(file.path) appeared while the import built it; nothing was written to it"
                                          : "cannot name the new file \(file.path): \(String(cString: strerror(error)))")
        }
        unlink(building)
        let error = syncDirectory(holding: file.path)
        guard error == 0 else { throw failure("cannot sync the directory of \(file.path): \(String(cString: strerror(error)))") }
    }

    private func sync(_ path: String, what: String) throws(StoreError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("cannot open \(what) to sync it: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("cannot sync \(what): \(String(cString: strerror(errno)))") }
    }

    private func failure(_ message: String) -> StoreError {
        StoreError(kind: .io, resultCode: SQLITE_IOERR, message: message, path: file.path)
    }

    /// A batch for every transaction of this writer, whichever file they write.
    public func makeUpsertBatch() -> UpsertBatch {
        let batch = UpsertBatch(beside: file.path)
        batch.spilled = { [unowned self] ids in
            switch phase {
            case .store(_, let writer), .buildingWith(let writer): writer.takeSpilled(ids)
            case .building, .built: false
            }
        }
        return batch
    }

    public func upsert(_ batch: UpsertBatch) throws {
        switch phase {
        case .store(_, let writer), .buildingWith(let writer):
            try writer.upsert(batch)
        case .building, .built:
            try transaction { try upsert(batch) }
        }
    }

    public func checkpoint() throws {
        // A built file has no log to copy.
        if case .store(_, let writer) = phase { try writer.checkpoint() }
    }

    /// Removes the `.lock` file beside the store at the end of a clean run; the lock itself is
    /// held until this writer is gone.
    public func removeLockFile() {
        file.removeLockFile()
    }
}
