import CSQLite

/// Reads profiles over a connection of its own, with its statements prepared
/// once. Lookups allocate nothing: the id is bound in place and the row is
/// handed out as views into SQLite's memory.
///
/// Threading: one thread at a time.
final class SQLiteProfileReader: ProfileReader {
    private let lookupStatement: Statement
    private let countStatement: Statement
    private let recentStatement: Statement
    private let scanStatement: Statement
    private let beginStatement: Statement
    private let endStatement: Statement

    init(file: StoreFile) throws(StoreError) {
        let connection = try Connection(file: file)
        // query_only: a reader never writes, whatever a caller gets wrong.
        // mmap: reads of the database file skip a copy into the page cache.
        try connection.execute("""
            PRAGMA query_only = ON;
            PRAGMA mmap_size = \(Self.mapBytes);
            PRAGMA cache_size = -\(Self.cacheKibibytes);
            """)
        try connection.applySynchronousMode()
        // Not user_id: the row's is the one bound, byte for byte (BINARY collation), and each
        // text column costs SQLite a copy into memory it allocates and frees per lookup.
        lookupStatement = try Statement(connection,
            "SELECT name, portrait_uri FROM profiles WHERE user_id = ?1")
        countStatement = try Statement(connection, "SELECT count(*) FROM profiles")
        recentStatement = try Statement(connection,
            "SELECT user_id, name, portrait_uri FROM profiles ORDER BY seq DESC LIMIT ?1")
        scanStatement = try Statement(connection,
            "SELECT user_id, name, portrait_uri FROM profiles WHERE user_id > ?1 ORDER BY user_id LIMIT ?2")
        beginStatement = try Statement(connection, "BEGIN")
        endStatement = try Statement(connection, "COMMIT")
    }

    static let mapBytes = 1 << 30
    static let cacheKibibytes = 16 * 1024

    func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R {
        let statement = lookupStatement
        defer { statement.reset() }
        try statement.bind(1, userId)
        guard try statement.step() else { return try body(nil) }
        return try body(ProfileRow(userId: userId, name: statement.text(0), portraitUri: statement.text(1)))
    }

    func beginRead() throws {
        defer { beginStatement.reset() }
        _ = try beginStatement.step()
    }

    func endRead() {
        // Ending a read-only transaction cannot lose anything; a failure leaves it to the
        // next BEGIN to report.
        _ = try? endStatement.step()
        endStatement.reset()
    }

    func count() throws -> Int {
        let statement = countStatement
        defer { statement.reset() }
        _ = try statement.step()
        return Int(statement.int64(0))
    }

    func recent(limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        // SQLite reads a negative LIMIT as no limit at all.
        guard limit > 0 else { return }
        let statement = recentStatement
        defer { statement.reset() }
        try statement.bind(1, Int64(limit))
        while try statement.step() {
            try each(statement.profileRow)
        }
    }

    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        guard limit > 0 else { return }
        let statement = scanStatement
        defer { statement.reset() }
        try statement.bind(1, after)
        try statement.bind(2, Int64(limit))
        while try statement.step() {
            try each(statement.profileRow)
        }
    }
}
