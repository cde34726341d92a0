import CSQLite
import ProfileStore

/// A prepared statement that owns its handle and finalizes it in deinit.
///
/// Text is bound without copying (SQLITE_STATIC): the caller's buffer must
/// stay valid until `reset()`, which every user calls before returning.
///
/// Threading: the thread of its connection.
final class Statement {
    /// Keeps the connection open while the statement lives.
    let connection: Connection
    let handle: OpaquePointer
    let sql: String

    /// Prepares `sql` once, for many uses.
    ///
    /// - Throws: the SQLite error, carrying the SQL text.
    init(_ connection: Connection, _ sql: String) throws(StoreError) {
        self.connection = connection
        self.sql = sql
        var prepared: OpaquePointer?
        let code = sqlite3_prepare_v3(connection.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
        guard code == SQLITE_OK, let prepared else {
            throw connection.error(code == SQLITE_OK ? SQLITE_ERROR : code, sql: sql)
        }
        handle = prepared
    }

    deinit {
        sqlite3_finalize(handle)
    }

    /// Binds text at a 1-based index.
    @inline(__always)
    func bind(_ index: Int32, _ text: UnsafeRawBufferPointer) throws(StoreError) {
        let bytes = text.baseAddress?.assumingMemoryBound(to: CChar.self) ?? profiled_sqlite_empty_text()
        let code = sqlite3_bind_text(handle, index, bytes, Int32(text.count), nil)
        guard code == SQLITE_OK else { throw connection.error(code, sql: sql) }
    }

    @inline(__always)
    func bind(_ index: Int32, _ value: Int64) throws(StoreError) {
        let code = sqlite3_bind_int64(handle, index, value)
        guard code == SQLITE_OK else { throw connection.error(code, sql: sql) }
    }

    /// Steps once: true when a row is ready, false when done.
    @inline(__always)
    func step() throws(StoreError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code: throw connection.error(code, sql: sql)
        }
    }

    /// Makes the statement ready for the next use and forgets the bound
    /// buffers. Its result repeats the last step's error, already reported.
    @inline(__always)
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    @inline(__always)
    func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    /// A view of a text column, valid until the next step or reset.
    @inline(__always)
    func text(_ column: Int32) -> UnsafeRawBufferPointer {
        // column_text before column_bytes: the documented order that avoids a conversion.
        let bytes = sqlite3_column_text(handle, column)
        return UnsafeRawBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(handle, column)))
    }

    /// The current row, when the statement selects user_id, name, portrait_uri.
    @inline(__always)
    var profileRow: ProfileRow {
        ProfileRow(userId: text(0), name: text(1), portraitUri: text(2))
    }
}

@available(*, unavailable)
extension Statement: Sendable {}

extension Statement {
    /// Fails as SQLite would with the code a test injected into the store's writers, if any.
    @inline(__always)
    func checkFault() throws(StoreError) {
        guard let code = connection.file.fault else { return }
        throw connection.injectedFault(code, sql: sql)
    }

    /// Steps once and resets, for a statement whose rows do not matter.
    func run() throws(StoreError) {
        defer { reset() }
        _ = try step()
    }

    /// Steps a statement without parameters and returns its first row's first column.
    func firstInteger() throws(StoreError) -> Int64 {
        defer { reset() }
        guard try step() else {
            throw StoreError(resultCode: SQLITE_ERROR, message: "no row", sql: sql, path: connection.file.path)
        }
        return int64(0)
    }

    /// Runs this ROLLBACK after a failed transaction if SQLite did not end it by itself, as it
    /// does after some errors; a failure here leaves the first error to be reported.
    func rollBackIfOpen() {
        guard connection.isInTransaction else { return }
        _ = try? step()
        reset()
    }
}
