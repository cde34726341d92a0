import Glibc
import CSQLite

/// Writes profiles over a connection of its own, with its statements prepared
/// once.
///
/// The write sequence is a counter read as MAX(seq) when each transaction
/// begins, under the write lock: it survives restarts, and a rollback needs no
/// repair because the next transaction reads it again.
///
/// Upserts are written in batches (see `PendingUpserts`) before any other
/// statement and before COMMIT, so a failed upsert may surface at a later
/// call of the same transaction. Any failed write dooms its transaction: the
/// transaction rolls back and throws that error even if the body caught it.
///
/// Threading: one thread at a time (the writer thread).
final class SQLiteProfileWriter: ProfileWriter {
    private let connection: Connection
    private let beginStatement: Statement
    private let commitStatement: Statement
    private let rollbackStatement: Statement
    private let lastSequenceStatement: Statement
    private let upsertStatement: Statement
    private let upsertBatchStatement: Statement
    private let updateStatement: Statement
    private let deleteStatement: Statement
    private let deleteAllStatement: Statement
    private let checkpointStatement: Statement
    private let passiveCheckpointStatement: Statement
    private let pending = PendingUpserts()
    /// The write sequence of the newest row, while `isInTransaction`.
    private var lastSequence: Int64 = 0
    private var isInTransaction = false
    /// The first write of this transaction that failed.
    private var failure: StoreError?

    init(file: StoreFile, cacheKibibytes: Int) throws(StoreError) {
        connection = try Connection(file: file)
        // A big page cache keeps large import transactions from spilling to
        // the log before they commit; sorting for index builds stays in memory.
        // A checkpoint copies each page in the log back once however many
        // commits rewrote it, so with ids spread over a large table a rare
        // checkpoint is far cheaper per write: every 65,536 pages (about
        // 256 MiB of log) group commits of random ids over a million profiles
        // ran about 3x faster than every 10,000. After a checkpoint the log
        // file is cut back to 64 MiB.
        try connection.execute("""
            PRAGMA cache_size = -\(cacheKibibytes);
            PRAGMA temp_store = MEMORY;
            PRAGMA wal_autocheckpoint = \(Self.checkpointPages);
            PRAGMA journal_size_limit = \(Self.logBytesKeptAfterCheckpoint);
            """)
        try connection.applySynchronousMode()
        beginStatement = try Statement(connection, "BEGIN IMMEDIATE")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        lastSequenceStatement = try Statement(connection, "SELECT ifnull(max(seq), 0) FROM profiles")
        upsertStatement = try Statement(connection, Self.upsertSQL(rows: 1))
        upsertBatchStatement = try Statement(connection, Self.upsertSQL(rows: PendingUpserts.batchRows))
        updateStatement = try Statement(connection, """
            UPDATE profiles SET name = ifnull(?2, name), portrait_uri = ifnull(?3, portrait_uri), seq = ?4
            WHERE user_id = ?1 RETURNING user_id, name, portrait_uri
            """)
        deleteStatement = try Statement(connection, "DELETE FROM profiles WHERE user_id = ?1")
        deleteAllStatement = try Statement(connection, "DELETE FROM profiles")
        checkpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(TRUNCATE)")
        passiveCheckpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(PASSIVE)")
    }

    static let checkpointPages = 65_536
    static let logBytesKeptAfterCheckpoint = 64 << 20

    /// Inserts or replaces `rows` rows; a later row with the same id wins,
    /// since SQLite applies the rows of one statement in order.
    static func upsertSQL(rows: Int) -> String {
        let values = (0..<rows).map { row in
            let first = row * 4 + 1
            return "(?\(first), ?\(first + 1), ?\(first + 2), ?\(first + 3))"
        }
        return """
            INSERT INTO profiles (user_id, name, portrait_uri, seq) VALUES \(values.joined(separator: ", "))
            ON CONFLICT (user_id) DO UPDATE SET name = excluded.name, portrait_uri = excluded.portrait_uri, seq = excluded.seq
            """
    }

    func transaction<R>(_ body: () throws -> R) throws -> R {
        try run(beginStatement)
        isInTransaction = true
        failure = nil
        defer {
            isInTransaction = false
            pending.removeAll()
        }
        do {
            lastSequence = try run(lastSequenceStatement) { $0.int64(0) }
            let result = try body()
            try writePendingUpserts()
            if let failure { throw failure }
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
        lastSequence += 1
        pending.append(userId: userId, name: name, portraitUri: portraitUri, sequence: lastSequence)
        if pending.count == PendingUpserts.batchRows {
            try writePendingUpserts()
        }
    }

    func upsert(count: Int, row: (Int) -> ProfileRow) throws {
        guard count > 0 else { return }
        guard isInTransaction else {
            return try transaction { try upsert(count: count, row: row) }
        }
        // Sort row numbers by id; among equal ids the later row sorts last, and only it is
        // written, with the sequence its position in the input gives it. The first eight
        // bytes of each id, big-endian, decide most comparisons without touching the rows.
        var keyed = (0..<count).map { index -> (prefix: UInt64, index: Int) in
            let id = row(index).userId
            var prefix: UInt64 = 0
            for i in 0..<8 { prefix = prefix << 8 | UInt64(i < id.count ? id[i] : 0) }
            return (prefix, index)
        }
        keyed.sort { a, b in
            if a.prefix != b.prefix { return a.prefix < b.prefix }
            let left = row(a.index).userId
            let right = row(b.index).userId
            let common = min(left.count, right.count)
            let byBytes = common == 0 ? 0 : memcmp(left.baseAddress!, right.baseAddress!, common)
            if byBytes != 0 { return byBytes < 0 }
            if left.count != right.count { return left.count < right.count }
            return a.index < b.index
        }
        let order = keyed.map(\.index)
        let base = lastSequence
        for (position, index) in order.enumerated() {
            let current = row(index)
            if position + 1 < count {
                let next = row(order[position + 1]).userId
                if next.count == current.userId.count
                    && (next.count == 0 || memcmp(next.baseAddress!, current.userId.baseAddress!, next.count) == 0) {
                    continue
                }
            }
            pending.append(userId: current.userId, name: current.name, portraitUri: current.portraitUri,
                           sequence: base + Int64(index) + 1)
            if pending.count == PendingUpserts.batchRows {
                try writePendingUpserts()
            }
        }
        lastSequence = base + Int64(count)
    }

    func update(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer?, portraitUri: UnsafeRawBufferPointer?,
                _ body: (ProfileRow?) throws -> Void) throws {
        guard isInTransaction else {
            return try transaction { try update(userId: userId, name: name, portraitUri: portraitUri, body) }
        }
        try writePendingUpserts()
        let statement = updateStatement
        defer { statement.reset() }
        // With RETURNING, the first step makes the change and yields the row.
        let found = try write(statement) { statement throws(StoreError) in
            try statement.bind(1, userId)
            try statement.bind(2, name)
            try statement.bind(3, portraitUri)
            try statement.bind(4, lastSequence + 1)
        }
        guard found else {
            return try body(nil)
        }
        lastSequence += 1
        try body(statement.profileRow)
    }

    func delete(userId: UnsafeRawBufferPointer) throws -> Bool {
        guard isInTransaction else {
            return try transaction { try delete(userId: userId) }
        }
        try writePendingUpserts()
        defer { deleteStatement.reset() }
        _ = try write(deleteStatement) { statement throws(StoreError) in try statement.bind(1, userId) }
        return sqlite3_changes64(connection.handle) > 0
    }

    func deleteAll() throws {
        guard isInTransaction else {
            return try transaction { try deleteAll() }
        }
        try writePendingUpserts()
        defer { deleteAllStatement.reset() }
        _ = try write(deleteAllStatement) { _ throws(StoreError) in }
    }

    func checkpointWithoutWaiting() throws {
        _ = try run(passiveCheckpointStatement) { $0.int64(0) }
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

    /// Writes the pending upserts, a batch statement for each full batch and
    /// one-row statements for the rest.
    private func writePendingUpserts() throws(StoreError) {
        let count = pending.count
        defer { pending.removeAll() }
        var first = 0
        while first < count {
            let rows = count - first >= PendingUpserts.batchRows ? PendingUpserts.batchRows : 1
            let statement = rows == 1 ? upsertStatement : upsertBatchStatement
            defer { statement.reset() }
            _ = try write(statement) { statement throws(StoreError) in
                try pending.bind(first..<first + rows, to: statement)
            }
            first += rows
        }
    }

    /// Binds and steps a writing statement once; a failure dooms the
    /// transaction. The caller resets the statement after reading any row.
    ///
    /// - Returns: whether the step produced a row.
    private func write(_ statement: Statement, bind: (Statement) throws(StoreError) -> Void) throws(StoreError) -> Bool {
        do {
            try checkFault(statement)
            try bind(statement)
            return try statement.step()
        } catch {
            if failure == nil { failure = error }
            throw error
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
