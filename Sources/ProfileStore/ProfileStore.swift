/// One profile as views into the store's memory.
///
/// The buffers are valid only inside the callback that received the row: copy
/// what must outlive it. Values are UTF-8 without NUL bytes.
///
/// Threading: a row belongs to the thread running the callback.
public struct ProfileRow {
    public var userId: UnsafeRawBufferPointer
    public var name: UnsafeRawBufferPointer
    public var portraitUri: UnsafeRawBufferPointer

    public init(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }
}

/// Reads profiles.
///
/// Threading: not thread-safe. One thread at a time uses a reader; each server
/// worker owns one.
public protocol ProfileReader: AnyObject {
    /// Looks a profile up and calls `body` with it, or with nil when there is none.
    func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R
    /// The number of profiles in the store.
    func count() throws -> Int
    /// Up to `limit` profiles, newest first by write sequence; none when
    /// `limit` is not positive.
    func recent(limit: Int, _ each: (ProfileRow) throws -> Void) throws
    /// Up to `limit` profiles whose userId is strictly greater than `after` in
    /// byte order, ascending. An empty `after` starts at the beginning; a
    /// `limit` that is not positive gives none.
    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) throws -> Void) throws
    /// Opens a read transaction: every read until `endRead` sees the store as it was at the
    /// first of them. One transaction for many reads saves taking and releasing the read
    /// locks for each; a caller that must see newer commits ends it first.
    func beginRead() throws
    /// Ends the read transaction `beginRead` opened.
    func endRead()
}

/// Writes profiles.
///
/// The write methods belong inside `transaction`; called outside one, each
/// runs in a transaction of its own.
///
/// Threading: not thread-safe. The single writer thread owns it.
public protocol ProfileWriter: AnyObject {
    /// BEGIN IMMEDIATE; body; COMMIT. On any error: ROLLBACK and rethrow, so
    /// nothing of `body` stays. A write that fails dooms the transaction even
    /// when `body` catches its error. Not reentrant.
    func transaction<R>(_ body: () throws -> R) throws -> R
    /// Inserts or replaces a profile and gives it the next write sequence, so
    /// later calls are newer, also within one transaction. The row may be
    /// written at a later call of the transaction, which then reports its
    /// failure.
    func upsert(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) throws
    /// Inserts or replaces `count` rows as if upserted one after another in index order: row i
    /// gets a newer write sequence than row i - 1, and a repeated id keeps its last row. The
    /// store may write them in another order; SQLite writes rows sorted by id far faster into
    /// a large table. The views `row` returns need only live until the next call to it.
    func upsert(count: Int, row: (Int) -> ProfileRow) throws
    /// An empty batch for `upsert(_:)`; it keeps at most one run of rows in memory and the
    /// rest in an unnamed temporary file beside the store.
    func makeUpsertBatch() -> UpsertBatch
    /// Inserts or replaces every row of `batch` as if upserted one after another in the order
    /// they were appended (as `upsert(count:row:)` does), writing them sorted by id, then
    /// empties the batch, also when it throws. A large batch into a table not much larger may
    /// rebuild the write-sequence index within the transaction instead of updating it.
    func upsert(_ batch: UpsertBatch) throws
    /// Changes the given fields (nil keeps a field) and bumps the write
    /// sequence, then calls `body` with the row as it now is, or with nil when
    /// there is no such profile (and nothing changed).
    func update(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer?, portraitUri: UnsafeRawBufferPointer?,
                _ body: (ProfileRow?) throws -> Void) throws
    /// Removes a profile; true when there was one.
    func delete(userId: UnsafeRawBufferPointer) throws -> Bool
    /// Removes every profile.
    func deleteAll() throws
    /// Copies the write-ahead log into the database and truncates it; called
    /// at clean shutdown, outside a transaction.
    func checkpoint() throws
    /// Copies what it can of the write-ahead log into the database without
    /// waiting for readers or the writer. Run from a writer of its own on
    /// another thread, it keeps that copying out of the commits' way.
    func checkpointWithoutWaiting() throws
}

/// A store: hands out readers and writers.
///
/// Threading: thread-safe. Any thread may ask for a reader or a writer; the
/// reader or writer then stays on the thread that uses it.
public protocol ProfileStore: AnyObject, Sendable {
    func makeReader() throws -> any ProfileReader
    func makeWriter() throws -> any ProfileWriter
    /// The server's way in: writes committed to the write log first (see `WriteLogWriter`).
    func makeWriteLogWriter() throws -> any WriteLogWriter
    /// Merges the write log into the table (see `WriteLogFolder`), `rowsPerRange` ids in
    /// each transaction.
    func makeWriteLogFolder(rowsPerRange: Int) throws -> any WriteLogFolder
    /// Checkpoints the write log in the background (see `WriteLogCheckpointer`).
    func makeWriteLogCheckpointer() throws -> any WriteLogCheckpointer
    /// Names the store in logs, e.g. its path.
    var description: String { get }
}

extension ProfileStore {
    /// Rows a merge commits at a time unless told otherwise. Each range's transaction writes
    /// the table's pages of its ids once, as one transaction for the whole generation would
    /// (only the pages of `profiles_by_seq` that hold old entries, spread over the index, are
    /// written again by later ranges), and takes a fraction of a second: so long a writer
    /// held back by the cache's pin limit waits for pins to come back.
    public static var defaultRowsPerFoldRange: Int { 16_384 }

    /// Merges the write log into the table, `defaultRowsPerFoldRange` ids in each transaction.
    public func makeWriteLogFolder() throws -> any WriteLogFolder {
        try makeWriteLogFolder(rowsPerRange: Self.defaultRowsPerFoldRange)
    }
}
