import CSQLite
import Glibc
import ProfileStore
import ProfileSystem
import WireBytes

/// Writes the profile table directly, for offline tools (an import into a store file that no
/// server holds): large transactions, no write log.
///
/// `upsert(_:)` belongs inside `transaction`; called outside one, it runs in a transaction of
/// its own.
///
/// Threading: not thread-safe. One thread at a time.
public protocol ProfileWriter: AnyObject {
    /// BEGIN IMMEDIATE; body; COMMIT. On any error: ROLLBACK and rethrow, so
    /// nothing of `body` stays. A write that fails dooms the transaction even
    /// when `body` catches its error. Not reentrant.
    func transaction<R>(_ body: () throws -> R) throws -> R
    /// An empty batch for `upsert(_:)`; it keeps at most one run of rows in memory and the
    /// rest in an unnamed temporary file beside the store.
    func makeUpsertBatch() -> UpsertBatch
    /// Inserts or replaces every row of `batch` as if upserted one after another in the order
    /// they were appended: each row gets a newer write sequence than the rows before it, those
    /// of earlier batches of the transaction included, and a repeated id keeps its last row.
    /// Writes them sorted by id, then empties the batch, also when it throws. A large batch
    /// into a table not much larger may build the recency table again within the transaction
    /// instead of appending to it.
    func upsert(_ batch: UpsertBatch) throws
    /// Copies the write-ahead log into the database and truncates it; called
    /// at clean shutdown, outside a transaction.
    func checkpoint() throws
}

/// Writes profiles over a connection of its own, with its statements prepared
/// once.
///
/// The write sequence is a counter read as MAX(seq) when each transaction
/// begins, under the write lock: it survives restarts, and a rollback needs no
/// repair because the next transaction reads it again.
///
/// An upsert writes its rows several to a statement (see `PendingUpserts`),
/// all of them before it returns. Any failed write dooms its transaction: the
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
    private let recencyStatement: Statement
    private let recencyBatchStatement: Statement
    private let checkpointStatement: Statement
    private let pending = PendingUpserts()
    /// Writes `recent` for the chunks of ids a batch spills while the caller fills it; made at the first.
    private var recencyAhead: RecencyAhead?
    /// The write sequence of the newest row, while `isInTransaction`.
    private var lastSequence: Int64 = 0
    private var isInTransaction = false
    /// The first write of this transaction that failed.
    private var failure: StoreError?

    convenience init(file: StoreFile, cacheKibibytes: Int) throws(StoreError) {
        let connection = try Connection(file: file)
        try Self.configureForLargeTransactions(connection, cacheKibibytes: cacheKibibytes)
        try self.init(connection: connection)
    }

    deinit {
        recencyAhead?.stop()
    }

    /// A writer over `connection`, configured by the caller.
    init(connection: Connection) throws(StoreError) {
        self.connection = connection
        beginStatement = try Statement(connection, "BEGIN IMMEDIATE")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        lastSequenceStatement = try Statement(connection, RecencyTable.newestSequenceSQL)
        upsertStatement = try Statement(connection, Self.upsertSQL(rows: 1))
        upsertBatchStatement = try Statement(connection, Self.upsertSQL(rows: PendingUpserts.batchRows))
        // Each transaction's sequences are newer than any in `recent`: nothing to replace.
        recencyStatement = try Statement(connection, RecencyTable.appendSQL(rows: 1, replacing: false))
        recencyBatchStatement = try Statement(connection, RecencyTable.appendSQL(rows: PendingUpserts.batchRows, replacing: false))
        checkpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(TRUNCATE)")
    }

    static let checkpointPages = 65_536
    static let logBytesKeptAfterCheckpoint = 64 << 20

    /// Pragmas for a connection that writes the table in large transactions.
    ///
    /// The page cache is the caller's choice: the server keeps a small one, an
    /// offline import's sorted writes need little more. A sort larger than the
    /// cache (rebuilding the recent table over a large table) spills to a
    /// temporary file rather than to memory, so memory does not grow with the
    /// table: in memory, such a sort over three million rows took 270 MB.
    /// A checkpoint copies each page in the log back once however many
    /// commits rewrote it, so with ids spread over a large table a rare
    /// checkpoint is far cheaper per write: every 65,536 pages (about
    /// 256 MiB of log) group commits of random ids over a million profiles
    /// ran about 3x faster than every 10,000. After a checkpoint the log
    /// file is cut back to 64 MiB.
    static func configureForLargeTransactions(_ connection: Connection, cacheKibibytes: Int) throws(StoreError) {
        try connection.execute("""
            PRAGMA cache_size = -\(cacheKibibytes);
            PRAGMA temp_store = FILE;
            PRAGMA wal_autocheckpoint = \(checkpointPages);
            PRAGMA journal_size_limit = \(logBytesKeptAfterCheckpoint);
            """)
        try connection.applySynchronousMode()
    }

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
        try beginStatement.run()
        isInTransaction = true
        failure = nil
        defer { isInTransaction = false }
        do {
            lastSequence = try lastSequenceStatement.firstInteger()
            let result = try body()
            // A batch filled and never upserted may still have its recency being written.
            try finishRecencyAhead()
            if let failure { throw failure }
            try commitStatement.checkFault()
            try commitStatement.run()
            return result
        } catch {
            try? finishRecencyAhead()
            rollbackStatement.rollBackIfOpen()
            throw error
        }
    }

    /// Batches tell the writer of each chunk of ids they spill: inside a transaction, the
    /// chunk's recency rows are written on `recencyAhead`'s thread while the caller goes on
    /// reading its input, so that its parsing and SQLite's work overlap.
    func makeUpsertBatch() -> UpsertBatch {
        let batch = UpsertBatch(beside: connection.file.path)
        batch.spilled = { [unowned self] ids in takeSpilled(ids) }
        return batch
    }

    /// A batch's `spilled`: takes the chunk's recency when in a transaction.
    func takeSpilled(_ ids: UpsertBatch.SpilledIds) -> Bool {
        guard isInTransaction else { return false }
        let ahead = recencyAhead ?? RecencyAhead(writer: self)
        recencyAhead = ahead
        ahead.post(ids, base: lastSequence)
        return true
    }

    /// Waits until `recencyAhead` has written every chunk posted to it; the connection is this
    /// thread's again then. Throws (and dooms the transaction with) the first error it met.
    func finishRecencyAhead() throws(StoreError) {
        guard let error = recencyAhead?.finish() else { return }
        if failure == nil { failure = error }
        throw error
    }

    /// Appends one spilled chunk's ids to `recent`: on `recencyAhead`'s thread, while the thread
    /// that owns the writer does not touch the connection.
    fileprivate func writeRecency(_ ids: UpsertBatch.SpilledIds, base: Int64, pending: PendingUpserts) throws(StoreError) {
        defer { pending.removeAll() }
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        let write = { (pending: PendingUpserts) throws(StoreError) in
            try pending.write(single: self.recencyStatement, batch: self.recencyBatchStatement) { statement, rows throws(StoreError) in
                try statement.checkFault()
                try pending.bindRecency(rows, to: statement)
                _ = try statement.step()
            }
        }
        try ids.forEach { (position, userId) throws(StoreError) in
            if pending.count == PendingUpserts.batchRows { try write(pending) }
            pending.append(userId: userId, name: empty, portraitUri: empty, sequence: base + Int64(position) + 1)
        }
        try write(pending)
    }

    func upsert(_ batch: UpsertBatch) throws {
        guard batch.count > 0 else { return }
        guard isInTransaction else {
            return try transaction { try upsert(batch) }
        }
        defer {
            batch.removeAll()
            // A batch that failed part way leaves rows pending, which its doomed transaction drops.
            pending.removeAll()
        }
        try finishRecencyAhead()
        do throws(StoreError) {
            let base = lastSequence
            // The runs are merged on a thread of their own while this one upserts what it merged.
            let merged = MergedRows(batch, base: base)
            defer { merged.stop() }
            while let block = try merged.next() {
                try writeUpserts(block)
                merged.recycle(block)
            }
            // `recent` in input order, which is sequence order: each row goes at the end of
            // the table, with no sort (in id order the sequences are random, and inserting
            // them cost more than the profiles themselves). A repeated id's earlier rows are
            // stale at once, as after any rewrite. Both in this transaction, so no commit, and
            // no kill at any moment, can leave `recent` behind the table. The chunks of ids the
            // batch spilled in the transaction are there already (`recencyAhead`).
            try batch.forEachInInputOrder { (position, userId) throws(StoreError) in
                if pending.count == PendingUpserts.batchRows { try writePendingRecency() }
                pending.append(userId: userId, name: UnsafeRawBufferPointer(start: nil, count: 0),
                               portraitUri: UnsafeRawBufferPointer(start: nil, count: 0), sequence: base + Int64(position) + 1)
            }
            try writePendingRecency()
            lastSequence = base + Int64(batch.count)
        } catch {
            if failure == nil { failure = error }
            throw error
        }
    }

    func checkpoint() throws {
        try checkpointStatement.checkFault()
        // The row is (busy, log frames, checkpointed frames).
        let busy = try checkpointStatement.firstInteger()
        guard busy == 0 else {
            throw StoreError(resultCode: SQLITE_BUSY, message: "the checkpoint could not finish: the database is in use",
                             sql: checkpointStatement.sql, path: connection.file.path)
        }
    }

    /// Writes the pending rows to `recent` as (seq, user_id) pairs.
    private func writePendingRecency() throws(StoreError) {
        let pending = self.pending
        try pending.write(single: recencyStatement, batch: recencyBatchStatement) { statement, rows throws(StoreError) in
            try write(statement) { statement throws(StoreError) in try pending.bindRecency(rows, to: statement) }
        }
    }

    /// Writes `rows` as upserts, a batch statement for each full batch and one-row statements
    /// for the rest, and empties it.
    private func writeUpserts(_ rows: PendingUpserts) throws(StoreError) {
        try rows.write(single: upsertStatement, batch: upsertBatchStatement) { statement, range throws(StoreError) in
            try write(statement) { statement throws(StoreError) in try rows.bind(range, to: statement) }
        }
    }

    /// Binds and steps a writing statement once; a failure dooms the
    /// transaction. The caller resets the statement.
    private func write(_ statement: Statement, bind: (Statement) throws(StoreError) -> Void) throws(StoreError) {
        do {
            try statement.checkFault()
            try bind(statement)
            _ = try statement.step()
        } catch {
            if failure == nil { failure = error }
            throw error
        }
    }
}

/// A thread of the offline writer that appends a batch's spilled chunks of ids to `recent`
/// while the importing thread goes on parsing: the two take about a quarter of an import's
/// instructions each, and on a second core they overlap. The writer's connection is lent to
/// this thread from `post` until `finish` returns, and the importing thread only fills its
/// batch meanwhile.
///
/// Threading: `post`, `finish` and `stop` from the writer's thread; the work on a thread of its own.
private final class RecencyAhead: @unchecked Sendable {
    private unowned let writer: SQLiteProfileWriter
    private let lock = ConditionLock()
    /// Chunks posted and not yet written, with the sequence their positions count from.
    private var queue: [(ids: UpsertBatch.SpilledIds, base: Int64)] = []
    /// Whether the thread is writing a chunk it took from the queue.
    private var writing = false
    private var stopping = false
    /// The first error since the last `finish`; later chunks are skipped.
    private var failure: StoreError?
    private var thread: pthread_t?
    /// The thread's own rows pending for a statement.
    private let pending = PendingUpserts()

    init(writer: SQLiteProfileWriter) {
        self.writer = writer
    }

    func post(_ ids: UpsertBatch.SpilledIds, base: Int64) {
        if thread == nil { thread = startThread("import-recency") { [self] in run() } }
        lock.withLock { queue.append((ids, base)) }
        lock.broadcast()
    }

    /// Waits until every posted chunk is written, and returns the first error since the last call.
    func finish() -> StoreError? {
        lock.lock()
        defer { lock.unlock() }
        while writing || !queue.isEmpty { lock.wait() }
        defer { failure = nil }
        return failure
    }

    /// Ends the thread; the last call.
    func stop() {
        guard let thread else { return }
        lock.withLock { stopping = true }
        lock.broadcast()
        pthread_join(thread, nil)
    }

    private func run() {
        lock.lock()
        while true {
            while queue.isEmpty && !stopping { lock.wait() }
            if queue.isEmpty { break }
            let (ids, base) = queue.removeFirst()
            let skip = failure != nil
            writing = true
            lock.unlock()
            var error: StoreError?
            if !skip {
                do throws(StoreError) { try writer.writeRecency(ids, base: base, pending: pending) } catch let failed { error = failed }
            }
            lock.lock()
            writing = false
            if failure == nil { failure = error }
            lock.broadcast()
        }
        lock.unlock()
    }
}

/// A batch's rows in id order, the last row of a repeated id only, each with its write sequence,
/// merged from the batch's sorted runs on a thread of its own and handed over in blocks, so that
/// reading and merging the runs (about an eighth of an import's instructions) overlaps with
/// SQLite's inserts on the writer's thread. The batch is the merging thread's until `stop`.
///
/// Threading: `next`, `recycle` and `stop` from the writer's thread.
private final class MergedRows: @unchecked Sendable {
    /// Rows per block: enough that handing one over costs nothing per row.
    static let blockRows = 4096
    private let lock = ConditionLock()
    /// Blocks merged, oldest first, and blocks to merge into.
    private var full: [PendingUpserts] = []
    private var free: [PendingUpserts] = (0..<3).map { _ in PendingUpserts() }
    private var merged = false
    private var stopping = false
    private var failure: StoreError?
    private var thread: pthread_t?

    /// Ends the merge when the writer stops taking blocks (it failed); never reported.
    private static let stopped = StoreError(kind: .interrupted, code: "stopped", message: "the merge was stopped", path: "")

    init(_ batch: UpsertBatch, base: Int64) {
        nonisolated(unsafe) let batch = batch
        thread = startThread("import-merge") { [self] in merge(batch, base: base) }
    }

    private func merge(_ batch: UpsertBatch, base: Int64) {
        var error: StoreError?
        do throws(StoreError) {
            guard var block = take() else { throw Self.stopped }
            try batch.forEachSorted { (row, position) throws(StoreError) in
                // The runs are sorted by (id, position): a repeated id from a later run follows
                // right after, and replaces the row before it; a block is handed over only at
                // a new id, so that it can still be replaced.
                if let last = block.lastUserId, bytesEqual(last, row.userId) {
                    block.removeLast()
                } else if block.count >= Self.blockRows {
                    hand(block)
                    guard let next = take() else { throw Self.stopped }
                    block = next
                }
                block.append(userId: row.userId, name: row.name, portraitUri: row.portraitUri,
                             sequence: base + Int64(position) + 1)
            }
            hand(block)
        } catch let failed {
            error = failed
        }
        lock.withLock {
            merged = true
            if failure == nil && !stopping { failure = error }
        }
        lock.broadcast()
    }

    /// A block to merge into; nil once the writer stopped taking them.
    private func take() -> PendingUpserts? {
        lock.withLock {
            while free.isEmpty && !stopping { lock.wait() }
            return stopping ? nil : free.removeLast()
        }
    }

    private func hand(_ block: PendingUpserts) {
        lock.withLock { full.append(block) }
        lock.broadcast()
    }

    /// The next block, oldest first; nil after the last.
    /// - Throws: what the merge met (reading the runs).
    func next() throws(StoreError) -> PendingUpserts? {
        lock.lock()
        defer { lock.unlock() }
        while full.isEmpty && !merged { lock.wait() }
        if !full.isEmpty { return full.removeFirst() }
        if let failure { throw failure }
        return nil
    }

    /// Gives back a block the writer has written (and emptied).
    func recycle(_ block: PendingUpserts) {
        lock.withLock { free.append(block) }
        lock.broadcast()
    }

    /// Ends the merge, finished or not, and waits for its thread; the batch is the caller's again.
    func stop() {
        guard let thread else { return }
        lock.withLock { stopping = true }
        lock.broadcast()
        pthread_join(thread, nil)
        self.thread = nil
    }
}
