import CSQLite

/// Writes profiles over a connection of its own, with its statements prepared
/// once.
///
/// The write sequence is a counter read as MAX(seq) when each transaction
/// begins, under the write lock: it survives restarts, and a rollback needs no
/// repair because the next transaction reads it again.
///
/// Threading: one thread at a time (the writer thread).
final class SQLiteProfileWriter: ProfileWriter {
    private let connection: Connection
    private let beginStatement: Statement
    private let commitStatement: Statement
    private let rollbackStatement: Statement
    private let lastSequenceStatement: Statement
    private let upsertStatement: Statement
    private let updateStatement: Statement
    private let deleteStatement: Statement
    private let deleteAllStatement: Statement
    private let checkpointStatement: Statement
    /// The write sequence of the newest row, while `isInTransaction`.
    private var lastSequence: Int64 = 0
    private var isInTransaction = false

    init(file: StoreFile) throws(StoreError) {
        connection = try Connection(file: file)
        // A big page cache keeps large import transactions from spilling to
        // the log before they commit; sorting for index builds stays in memory.
        try connection.execute("""
            PRAGMA cache_size = -\(Self.cacheKibibytes);
            PRAGMA temp_store = MEMORY;
            """)
        try connection.applySynchronousMode()
        beginStatement = try Statement(connection, "BEGIN IMMEDIATE")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        lastSequenceStatement = try Statement(connection, "SELECT ifnull(max(seq), 0) FROM profiles")
        upsertStatement = try Statement(connection, """
            INSERT INTO profiles (user_id, name, portrait_uri, seq) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (user_id) DO UPDATE SET name = excluded.name, portrait_uri = excluded.portrait_uri, seq = excluded.seq
            """)
        updateStatement = try Statement(connection, """
            UPDATE profiles SET name = ifnull(?2, name), portrait_uri = ifnull(?3, portrait_uri), seq = ?4
            WHERE user_id = ?1 RETURNING user_id, name, portrait_uri
            """)
        deleteStatement = try Statement(connection, "DELETE FROM profiles WHERE user_id = ?1")
        deleteAllStatement = try Statement(connection, "DELETE FROM profiles")
        checkpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(TRUNCATE)")
    }

    static let cacheKibibytes = 256 * 1024

    func transaction<R>(_ body: () throws -> R) throws -> R {
        try run(beginStatement)
        isInTransaction = true
        defer { isInTransaction = false }
        do {
            lastSequence = try run(lastSequenceStatement) { $0.int64(0) }
            let result = try body()
            try checkFault(commitStatement)
            try run(commitStatement)
            return result
        } catch {
            // SQLite ends the transaction by itself after some errors.
            if connection.isInTransaction {
                _ = try? rollbackStatement.step()
                rollbackStatement.reset()
            }
            throw error
        }
    }

    func upsert(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) throws {
        guard isInTransaction else {
            return try transaction { try upsert(userId: userId, name: name, portraitUri: portraitUri) }
        }
        let statement = upsertStatement
        try checkFault(statement)
        defer { statement.reset() }
        try statement.bind(1, userId)
        try statement.bind(2, name)
        try statement.bind(3, portraitUri)
        try statement.bind(4, lastSequence + 1)
        _ = try statement.step()
        lastSequence += 1
    }

    func update(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer?, portraitUri: UnsafeRawBufferPointer?,
                _ body: (ProfileRow?) throws -> Void) throws {
        guard isInTransaction else {
            return try transaction { try update(userId: userId, name: name, portraitUri: portraitUri, body) }
        }
        let statement = updateStatement
        try checkFault(statement)
        defer { statement.reset() }
        try statement.bind(1, userId)
        try statement.bind(2, name)
        try statement.bind(3, portraitUri)
        try statement.bind(4, lastSequence + 1)
        // With RETURNING, the first step makes the change and yields the row.
        guard try statement.step() else {
            return try body(nil)
        }
        lastSequence += 1
        try body(statement.profileRow)
    }

    func delete(userId: UnsafeRawBufferPointer) throws -> Bool {
        guard isInTransaction else {
            return try transaction { try delete(userId: userId) }
        }
        let statement = deleteStatement
        try checkFault(statement)
        defer { statement.reset() }
        try statement.bind(1, userId)
        _ = try statement.step()
        return sqlite3_changes64(connection.handle) > 0
    }

    func deleteAll() throws {
        guard isInTransaction else {
            return try transaction { try deleteAll() }
        }
        try checkFault(deleteAllStatement)
        try run(deleteAllStatement)
    }

    func checkpoint() throws {
        try checkFault(checkpointStatement)
        // The row is (busy, log frames, checkpointed frames).
        let busy = try run(checkpointStatement) { $0.int64(0) }
        guard busy == 0 else {
            throw StoreError(resultCode: SQLITE_BUSY, message: "the checkpoint could not finish: the database is in use",
                             sql: checkpointStatement.sql, path: connection.file.path)
        }
    }

    /// Steps a statement without parameters through its first row.
    private func run(_ statement: Statement) throws(StoreError) {
        defer { statement.reset() }
        _ = try statement.step()
    }

    /// Steps a statement without parameters and reads its first row.
    private func run<T>(_ statement: Statement, _ read: (Statement) -> T) throws(StoreError) -> T {
        defer { statement.reset() }
        guard try statement.step() else {
            throw StoreError(resultCode: SQLITE_ERROR, message: "no row", sql: statement.sql, path: connection.file.path)
        }
        return read(statement)
    }

    /// Fails as SQLite would with the code injected for tests, if any.
    @inline(__always)
    private func checkFault(_ statement: Statement) throws(StoreError) {
        guard let code = connection.file.fault else { return }
        throw StoreError(resultCode: code, message: "\(String(cString: sqlite3_errstr(code))) (injected)",
                         sql: statement.sql, path: connection.file.path)
    }
}
