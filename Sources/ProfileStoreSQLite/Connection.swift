import CSQLite
import ProfileStore

/// One SQLite connection to the store's file, closed in deinit.
///
/// Threading: one thread at a time (it is opened with SQLITE_OPEN_NOMUTEX).
final class Connection {
    let file: StoreFile
    let handle: OpaquePointer

    /// Opens the file with the store's busy timeout and extended result codes.
    ///
    /// - Parameters:
    ///   - path: the file to open, when not the store's own: its write log's.
    ///   - create: create the file when it is missing (only the store's
    ///     first connection does; later ones expect the file it validated).
    init(file: StoreFile, path: String? = nil, create: Bool = false) throws(StoreError) {
        self.file = file
        _ = sqliteConfigured
        var opened: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
            | (create ? SQLITE_OPEN_CREATE : 0)
        let code = sqlite3_open_v2(path ?? file.path, &opened, flags, nil)
        guard code == SQLITE_OK, let opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(opened)
            throw StoreError(resultCode: code, message: message, sql: nil, path: file.path)
        }
        handle = opened
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, file.busyTimeoutMilliseconds)
        // Debian's SQLite is built with secure_delete on: every page a delete frees is
        // overwritten with zeros and written out (emptying 500,000 rows, 60 MB, took 0.74 s
        // instead of 0.03 s, and a checkpoint copied the zeros back). FAST still zeroes deleted
        // rows on the pages that are written anyway (a DEL's row in its leaf), and leaves freed
        // pages as they are.
        try execute("PRAGMA secure_delete = FAST")
    }

    deinit {
        // Statements hold their connection, so all of them are finalized by now.
        sqlite3_close_v2(handle)
    }

    /// Sets the store's durability level: in WAL mode NORMAL syncs only at
    /// checkpoints, FULL at every commit.
    func applySynchronousMode() throws(StoreError) {
        switch file.synchronous {
        case .normal: try execute("PRAGMA synchronous = NORMAL")
        case .full: try execute("PRAGMA synchronous = FULL")
        }
    }

    /// Switches the file to write-ahead logging (kept in the file) and sets the store's
    /// durability level; `what` names the file in the error when SQLite will not.
    func useWriteAheadLogging(for what: String) throws(StoreError) {
        let mode = try text("PRAGMA journal_mode = WAL")
        guard mode == "wal" else {
            throw StoreError(kind: .other, resultCode: SQLITE_ERROR,
                             message: "\(what) cannot use write-ahead logging (journal mode stayed \(mode))",
                             path: file.path)
        }
        try applySynchronousMode()
    }

    /// Runs SQL without parameters (pragmas, schema), ignoring any rows.
    func execute(_ sql: String) throws(StoreError) {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw error(code, sql: sql) }
    }

    /// The first column of the first row of a query without parameters.
    func integer(_ sql: String) throws(StoreError) -> Int64 {
        let statement = try Statement(self, sql)
        defer { statement.reset() }
        guard try statement.step() else {
            throw StoreError(resultCode: SQLITE_ERROR, message: "no row", sql: sql, path: file.path)
        }
        return statement.int64(0)
    }

    /// The first column of the first row of a query without parameters, as text.
    func text(_ sql: String) throws(StoreError) -> String {
        let statement = try Statement(self, sql)
        defer { statement.reset() }
        guard try statement.step() else {
            throw StoreError(resultCode: SQLITE_ERROR, message: "no row", sql: sql, path: file.path)
        }
        return String(decoding: statement.text(0), as: UTF8.self)
    }

    /// The error a writer fails with when a test injected `code` (see `StoreFile.setFault`).
    func injectedFault(_ code: Int32, sql: String) -> StoreError {
        StoreError(resultCode: code, message: "\(String(cString: sqlite3_errstr(code))) (injected)", sql: sql,
                   path: file.path)
    }

    /// The error SQLite just reported on this connection.
    func error(_ code: Int32, sql: String?) -> StoreError {
        StoreError(resultCode: code, message: String(cString: sqlite3_errmsg(handle)), sql: sql, path: file.path)
    }

    /// Whether a transaction is open (SQLite may end one by itself on some errors).
    var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }
}

/// Configures SQLite once per process, before its first connection: without
/// memory statistics, reader threads do not contend on one global mutex.
private let sqliteConfigured: Void = {
    _ = profiled_sqlite_disable_memory_statistics()
}()

@available(*, unavailable)
extension Connection: Sendable {}
