import CLinux
import CSQLite
import Glibc
import ProfileStore
import ProfileSystem
import Synchronization
import WireBytes

/// Moves the write buffer's memtables into the profile table, and empties the table for a
/// FLUSHALL, on a thread of its own.
///
/// A merge takes every memtable there is (freezing the active one), walks their newest
/// entries in id order, and writes them into the table `rowsPerRange` rows per transaction,
/// so that many writes share each page of the table. Once every
/// range has committed it records the newest sequence merged (`log_state.merged_seq`) in a
/// transaction synced to disk, drops the memtables from the buffer, and removes the log
/// segments that hold nothing newer. A crash anywhere in between replays those writes again
/// at the next open, which writes the same rows.
///
/// A merge nobody waits for is background work: each of its steps runs on a thread of its own
/// at SCHED_IDLE, which takes only CPU time nothing else wants, and is abandoned, having
/// changed nothing, as soon as the merge becomes urgent (`WriteBuffer.isUrgent`); it then
/// runs again at once at normal priority on the merger's thread, and the ranges committed
/// before stay merged.
///
/// Threading: `run` is the merger thread's body; `stop` from any thread; `mergeEverything`
/// only while no merger thread runs (opening the store).
final class Merger: @unchecked Sendable {
    private let file: StoreFile
    private let buffer: WriteBuffer
    private let log: WriteLogWriter?
    private let connection: Connection
    private let beginStatement: Statement
    private let commitStatement: Statement
    private let rollbackStatement: Statement
    private let upsertStatement: Statement
    private let upsertBatchStatement: Statement
    private let deleteStatement: Statement
    private let deleteAllStatement: Statement
    private let deleteRecentStatement: Statement
    private let recencyStatement: Statement
    private let recencyBatchStatement: Statement
    private let mergedThroughStatement: Statement
    private let passiveCheckpointStatement: Statement
    private let pending = PendingUpserts()
    let rowsPerRange: Int
    /// Tells the operator about a failure: a message and the error.
    private let warn: @Sendable (_ message: String, _ error: String) -> Void

    /// Why the last merge failed, until one succeeds.
    private let failure = Mutex<String?>(nil)
    let merges = Atomic<Int>(0)
    let mergedRows = Atomic<Int>(0)
    /// Background steps given up because the merge turned urgent, each run again at once.
    let abandonedSteps = Atomic<Int>(0)
    private let idleRefusalLogged = Atomic<Bool>(false)
    /// Wakes the sorter thread; `memtablesFroze` and `sorterStopping` are under it.
    private let sorterWake = ConditionLock()
    private var memtablesFroze = false
    private var sorterStopping = false

    /// A merge starts once the buffer holds `WriteBuffer.mergeStartShare` of its limit, or
    /// once its oldest write has waited this long; before, small merges would cost more per row.
    static let maximumWaitNanos = 1_000_000_000

    /// - Parameters:
    ///   - log: removes the segments a merge made obsolete; nil when opening the store, which
    ///     removes them itself.
    init(file: StoreFile, buffer: WriteBuffer, log: WriteLogWriter?, cacheKibibytes: Int,
         rowsPerRange: Int = SQLiteProfileStore.defaultRowsPerMergeRange,
         warn: @escaping @Sendable (_ message: String, _ error: String) -> Void) throws(StoreError) {
        precondition(rowsPerRange > 0, "a merge range holds at least one row")
        self.warn = warn
        self.file = file
        self.buffer = buffer
        self.log = log
        self.rowsPerRange = rowsPerRange
        connection = try Connection(file: file)
        // It writes the table in large transactions, as the offline writer does, and reads the
        // pages it changes through a mapping of the file rather than copies of them.
        try SQLiteProfileWriter.configureForLargeTransactions(connection, cacheKibibytes: cacheKibibytes)
        try connection.execute("PRAGMA mmap_size = \(SQLiteProfileReader.mapBytes)")
        // Only this connection writes the table while a server holds the store.
        beginStatement = try Statement(connection, "BEGIN IMMEDIATE")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        upsertStatement = try Statement(connection, SQLiteProfileWriter.upsertSQL(rows: 1))
        upsertBatchStatement = try Statement(connection, SQLiteProfileWriter.upsertSQL(rows: PendingUpserts.batchRows))
        deleteStatement = try Statement(connection, "DELETE FROM profiles WHERE user_id = ?1")
        deleteAllStatement = try Statement(connection, "DELETE FROM profiles")
        deleteRecentStatement = try Statement(connection, "DELETE FROM recent")
        recencyStatement = try Statement(connection, RecencyTable.appendSQL(rows: 1))
        recencyBatchStatement = try Statement(connection, RecencyTable.appendSQL(rows: Self.recencyRowsPerStatement))
        mergedThroughStatement = try Statement(connection, "UPDATE log_state SET merged_seq = ?1")
        passiveCheckpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(PASSIVE)")
    }

    /// The newest write sequence the table has, as recorded (see `log_state`).
    static func mergedThrough(_ connection: Connection) throws(StoreError) -> Int64 {
        try connection.integer("SELECT merged_seq FROM log_state")
    }

    // MARK: The thread

    /// Merges that may fail in a row once stopping, before the merger gives up: with the
    /// pauses between them, about a second.
    static let attemptsWhileStopping = 3

    /// The merger thread's loop: merges when there is enough to merge or a write waits too
    /// long, empties the table after a FLUSHALL, and after `stop` merges what is left and
    /// returns.
    func run() {
        var failures = 0
        while true {
            // Stopping, a store that keeps failing (a full disk, a read-only directory) gets a
            // few more tries, not an endless retry: what is not merged stays in the write log,
            // which is durable, and the next open merges it.
            switch buffer.waitForMergeWork(givingUp: failures >= Self.attemptsWhileStopping,
                                           maximumWaitNanos: Self.maximumWaitNanos) {
            case .stop:
                return
            case .emptyTable(let sequence):
                if attempt(&failures, { () throws(StoreError) in try emptyTable(through: sequence) }) {
                    buffer.tableEmptied(at: sequence)
                }
            case .merge(let memtables):
                var completed = false
                let ok = attempt(&failures) { () throws(StoreError) in
                    completed = try merge(memtables, background: true)
                }
                if ok && completed { finish(memtables) }
            }
        }
    }

    /// Why the last merge failed, until one succeeds; nil while merges succeed.
    var lastFailure: String? { failure.withLock { $0 } }

    /// Runs one merge or emptying; on failure records why, waits a little (longer after each
    /// failure in a row) and says so.
    private func attempt(_ failures: inout Int, _ work: () throws(StoreError) -> Void) -> Bool {
        do {
            try work()
            failures = 0
            failure.withLock { $0 = nil }
            return true
        } catch {
            failures += 1
            let reason = error.reason
            // Once per run of failures: a full disk would otherwise fill the log with the same line.
            if failures == 1 { warn("merging the write log into the table failed; retrying", "\(error)") }
            failure.withLock { $0 = reason }
            usleep(useconds_t(min(failures, 10) * 100_000))
            return false
        }
    }

    /// After a merge committed: the buffer forgets what it merged, waiting writers may go on,
    /// and the log loses the segments it no longer needs.
    private func finish(_ memtables: [Memtable]) {
        let through = memtables.map(\.lastSequence).max() ?? 0
        buffer.dropMerged(memtables)
        log?.removeSegments(mergedThrough: through)
        // Copies the merge's pages back into the database file; never waits for readers.
        _ = try? passiveCheckpointStatement.firstInteger()
    }

    /// Sorts memtables frozen since the last look, so that a SCAN finds at most the active one
    /// unsorted: one at a time, outside the buffer's lock (a frozen memtable never changes).
    /// The sorter thread only, without the lock.
    private func sortFrozenMemtables() {
        while let next = buffer.oldestUnsortedFrozen() {
            buffer.publish(sortedLatest: next.makeSortedLatest(), of: next)
        }
    }

    /// The sorter thread's loop: sorts each memtable as soon as the writes freeze it. The
    /// merger's thread spends most of a busy merge in steps that cannot stop for it (the
    /// recency append, the synced record, the checkpoint: most of a second together), and
    /// every memtable left unsorted meanwhile cost each SCAN a pass over its entries. It waits
    /// on a condition of its own: the buffer's is signalled at nearly every commit. Returns
    /// after `stop`.
    func runSorter() {
        while true {
            sorterWake.lock()
            while !memtablesFroze && !sorterStopping { sorterWake.wait() }
            let stop = sorterStopping
            memtablesFroze = false
            sorterWake.unlock()
            if stop { return }
            sortFrozenMemtables()
        }
    }

    /// Tells the sorter thread that a commit froze a memtable. Any thread.
    func memtableFroze() {
        sorterWake.lock()
        memtablesFroze = true
        sorterWake.unlock()
        sorterWake.signal()
    }

    /// Asks the merger thread to merge what is left and return, and the sorter thread to
    /// return. Any thread.
    func stop() {
        buffer.requestStop()
        sorterWake.lock()
        sorterStopping = true
        sorterWake.unlock()
        sorterWake.signal()
    }

    // MARK: Merging

    /// Merges every memtable of the buffer now, on the calling thread: opening a store whose
    /// log had writes the table lacked. No merger thread may run.
    func mergeEverything() throws(StoreError) {
        if let cleared = buffer.pendingClear {
            try emptyTable(through: cleared)
            buffer.tableEmptied(at: cleared)
        }
        let memtables = buffer.freezeAll()
        guard !memtables.isEmpty else { return }
        _ = try merge(memtables, background: false)
        finish(memtables)
    }

    /// Writes the newest entry of each id in `memtables` into the table, range by range, then
    /// records the newest sequence merged, synced to disk. Returns false, having recorded
    /// nothing, when a FLUSHALL came meanwhile: its emptying of the table goes first.
    private func merge(_ memtables: [Memtable], background: Bool) throws(StoreError) -> Bool {
        // Asked under the lock: the sorter thread publishes too. One it is sorting right now is
        // sorted here as well; the first to publish wins, and both orders are the same.
        for memtable in buffer.unsorted(memtables) {
            let sorted = try step(background: background) { _ in memtable.makeSortedLatest() }
            buffer.publish(sortedLatest: sorted, of: memtable)
        }
        var cursor = MergeCursor(memtables)
        var rows = 0
        var written: [MemtableEntry] = []
        while !cursor.isAtEnd {
            if flushIsPending { return false }
            // A step abandoned in the background runs again from the same cursor: its rows were
            // rolled back and must be written again.
            let start = cursor
            let range = try step(background: background) { abandon throws(StoreError) in
                try self.writeRange(from: start, abandonIf: abandon)
            }
            cursor = range.next
            rows += range.rows
            written += range.written
        }
        if flushIsPending { return false }
        // The rows' sequences, in order: appends at the end of `recent`.
        var bySequence = written.map { (sequence: $0.sequence, entry: $0) }
        bySequence.sort { $0.sequence < $1.sequence }
        let inOrder = bySequence.map(\.entry)
        try step(background: background) { abandon throws(StoreError) in
            try self.transaction(abandonIf: abandon) { () throws(StoreError) in try self.appendRecency(inOrder) }
        }
        try recordMerged(through: memtables.map(\.lastSequence).max() ?? 0)
        merges.add(1, ordering: .relaxed)
        mergedRows.add(rows, ordering: .relaxed)
        try tidyRecency(appended: written.count, background: background)
        return true
    }

    /// Rows `recent` holds, stale ones included, and the profiles the table held when last
    /// counted: nil until first needed.
    private var recencyRows: Int?
    private var liveRows = 0

    /// Builds `recent` again once its stale rows far outnumber the live ones (see `RecencyTable.needsRebuild`).
    private func tidyRecency(appended: Int, background: Bool) throws(StoreError) {
        // Counted once; the count comes after this merge's appends, so it holds them.
        let rows: Int
        if let known = recencyRows { rows = known + appended } else { rows = Int(try connection.integer("SELECT count(*) FROM recent")) }
        recencyRows = rows
        let writesWait = buffer.isUrgent
        guard RecencyTable.needsRebuild(rows: rows, liveRows: liveRows, writesWait: writesWait) else { return }
        liveRows = Int(try connection.integer("SELECT count(*) FROM profiles"))
        guard RecencyTable.needsRebuild(rows: rows, liveRows: liveRows, writesWait: writesWait) else { return }
        do {
            // Not run again when writes start to wait meanwhile: it waits for a later merge.
            try step(background: background, rerunWhenUrgent: false) { abandon throws(StoreError) in
                try self.transaction(abandonIf: abandon) { () throws(StoreError) in
                    try self.connection.execute(RecencyTable.rebuildSQL)
                }
            }
        } catch where error.kind == .interrupted {
            return
        }
        recencyRows = liveRows
    }

    /// Appends (seq, user_id) of each entry to `recent`, in the order given.
    private func appendRecency(_ entries: [MemtableEntry]) throws(StoreError) {
        var first = 0
        while first < entries.count {
            let count = min(Self.recencyRowsPerStatement, entries.count - first)
            let statement = count == Self.recencyRowsPerStatement ? recencyBatchStatement : recencyStatement
            let rows = count == Self.recencyRowsPerStatement ? count : 1
            defer { statement.reset() }
            try statement.checkFault()
            for i in 0..<rows {
                try statement.bind(Int32(2 * i + 1), entries[first + i].sequence)
                try statement.bind(Int32(2 * i + 2), entries[first + i].userId)
            }
            _ = try statement.step()
            first += rows
        }
    }

    /// Rows of `recent` one statement appends.
    static let recencyRowsPerStatement = 64

    private var flushIsPending: Bool { buffer.pendingClear != nil }

    /// Writes the next `rowsPerRange` rows from `start` in one transaction; returns where the
    /// next range starts, how many rows this one wrote, and which of them were upserts (for
    /// `recent`).
    private func writeRange(from start: MergeCursor, abandonIf abandon: @escaping () -> Bool) throws(StoreError)
        -> (next: MergeCursor, rows: Int, written: [MemtableEntry]) {
        var cursor = start
        var written = 0
        var puts: [MemtableEntry] = []
        try transaction(abandonIf: abandon) { () throws(StoreError) in
            while written < rowsPerRange && !cursor.isAtEnd {
                takeNewest(min(Self.entriesPerCheck, rowsPerRange - written), from: &cursor)
                for entry in newestTaken {
                    if entry.isRemoval {
                        try writePending()
                        let statement = deleteStatement
                        defer { statement.reset() }
                        try statement.checkFault()
                        try statement.bind(1, entry.userId)
                        _ = try statement.step()
                    } else {
                        pending.append(userId: entry.userId, name: entry.name, portraitUri: entry.portraitUri,
                                       sequence: entry.sequence)
                        if pending.count == PendingUpserts.batchRows { try writePending() }
                        puts.append(entry)
                    }
                    written += 1
                }
            }
            try writePending()
        }
        return (cursor, written, puts)
    }

    /// Entries a merge checks for newer writes under one hold of the buffer's lock: the
    /// writer, which takes that lock for every commit, waits less, and the checks' memory
    /// misses overlap.
    static let entriesPerCheck = 64

    /// What `takeNewest` kept; the merge's thread (or its step's) only.
    private var newestTaken: [MemtableEntry] = []

    /// Takes the next `count` entries from the cursor and keeps in `newestTaken` those that are
    /// still the newest entry of their id. A newer write of an id waits in a memtable outside
    /// this merge: the next merge writes that one, and this one would be overwritten unread.
    private func takeNewest(_ count: Int, from cursor: inout MergeCursor) {
        newestTaken.removeAll(keepingCapacity: true)
        while newestTaken.count < count, let entry = cursor.next() { newestTaken.append(entry) }
        buffer.keepNewest(&newestTaken)
    }

    private func writePending() throws(StoreError) {
        let pending = self.pending
        try pending.write(single: upsertStatement, batch: upsertBatchStatement) { statement, rows throws(StoreError) in
            try statement.checkFault()
            try pending.bind(rows, to: statement)
            _ = try statement.step()
        }
    }

    /// FLUSHALL: empties the table and records the FLUSHALL's sequence as merged, in one
    /// transaction synced to disk, so no write before it comes back at the next open.
    private func emptyTable(through sequence: Int64) throws(StoreError) {
        try transaction(synced: true) { () throws(StoreError) in
            recencyRows = 0
            try deleteAllStatement.checkFault()
            try deleteAllStatement.run()
            try deleteRecentStatement.run()
            try bindMergedThrough(sequence)
        }
        log?.removeSegments(mergedThrough: sequence)
    }

    private func recordMerged(through sequence: Int64) throws(StoreError) {
        try transaction(synced: true) { () throws(StoreError) in try bindMergedThrough(sequence) }
    }

    private func bindMergedThrough(_ sequence: Int64) throws(StoreError) {
        let statement = mergedThroughStatement
        try statement.checkFault()
        try statement.bind(1, sequence)
        try statement.run()
    }

    /// BEGIN IMMEDIATE; body; COMMIT, rolled back on any error. `abandon` is asked every few
    /// thousand SQLite steps; once it answers true the statement stops and the transaction
    /// rolls back with `.interrupted`. `synced`: the commit waits for the disk even at
    /// `synchronous=NORMAL`, since the log segments it makes obsolete are removed after it.
    private func transaction(abandonIf abandon: (() -> Bool)? = nil, synced: Bool = false,
                             _ body: () throws(StoreError) -> Void) throws(StoreError) {
        if let abandon, abandon() { throw interrupted() }
        let switchesSync = synced && file.synchronous != .full
        if switchesSync { try connection.execute("PRAGMA synchronous = FULL") }
        defer { if switchesSync { try? connection.applySynchronousMode() } }
        try beginStatement.run()
        do {
            if let abandon {
                abandonCheck = abandon
                sqlite3_progress_handler(connection.handle, Self.stepsBetweenAbandonChecks, mergeProgress,
                                         Unmanaged.passUnretained(self).toOpaque())
            }
            defer {
                if abandon != nil {
                    sqlite3_progress_handler(connection.handle, 0, nil, nil)
                    abandonCheck = nil
                }
            }
            try body()
        } catch {
            pending.removeAll()
            rollbackStatement.rollBackIfOpen()
            throw error
        }
        do {
            try commitStatement.checkFault()
            try commitStatement.run()
        } catch {
            rollbackStatement.rollBackIfOpen()
            throw error
        }
    }

    /// Copies the database's write-ahead log back into the file and truncates it: the last step
    /// of a clean stop, once everything is merged.
    func checkpoint() throws(StoreError) {
        let busy = try connection.integer("PRAGMA wal_checkpoint(TRUNCATE)")
        guard busy == 0 else {
            throw StoreError(kind: .busy, resultCode: 5, message: "the checkpoint could not finish: the database is in use",
                             path: file.path)
        }
    }

    private func interrupted() -> StoreError {
        StoreError(kind: .interrupted, resultCode: SQLITE_INTERRUPT, message: "interrupted", path: file.path)
    }

    /// SQLite virtual-machine steps between two questions to `abandon`: an atomic load each
    /// time, so asking often costs nothing measurable, and an abandon takes effect promptly.
    static let stepsBetweenAbandonChecks: Int32 = 4096

    private var abandonCheck: (() -> Bool)?
    fileprivate var shouldAbandon: Bool { abandonCheck?() ?? false }

    /// Runs one step of a merge and returns its result. A background step runs on a thread of
    /// its own, named "merge", at SCHED_IDLE, and is abandoned when the merge turns urgent; it
    /// then runs again at once, urgently, on this thread, or, unless `rerunWhenUrgent`, throws
    /// `.interrupted`. Only a thread made for the step may drop to SCHED_IDLE: there is no way
    /// back from it without privileges.
    private func step<R>(background: Bool, rerunWhenUrgent: Bool = true,
                         _ body: @escaping (_ abandonIf: @escaping () -> Bool) throws(StoreError) -> R) throws(StoreError) -> R {
        nonisolated(unsafe) let body = body
        var background = background && !buffer.isUrgent
        while true {
            if !background { return try body { false } }
            let outcome = StepOutcome<R>()
            let buffer = self.buffer
            let run: @Sendable () -> Void = {
                if profiled_idle_this_thread() != 0 && !self.idleRefusalLogged.exchange(true, ordering: .relaxed) {
                    // Once: a system that refuses it (a seccomp filter, say) refuses every step.
                    self.warn("cannot move background merges to SCHED_IDLE; they run at normal priority",
                              String(cString: strerror(errno)))
                }
                do throws(StoreError) {
                    outcome.result = .success(try body { buffer.isUrgent })
                } catch {
                    outcome.result = .failure(error)
                }
            }
            guard let thread = tryStartThread("merge", run) else {
                background = false
                continue
            }
            pthread_join(thread, nil)
            switch outcome.result! {
            case .success(let value):
                return value
            case .failure(let error) where error.kind == .interrupted:
                // It became urgent while running in the background: run it again, now.
                abandonedSteps.add(1, ordering: .relaxed)
                guard rerunWhenUrgent else { throw error }
                background = false
            case .failure(let error):
                throw error
            }
        }
    }
}

/// What a merge step's thread hands back, read after joining it.
private final class StepOutcome<R>: @unchecked Sendable {
    var result: Result<R, StoreError>?
}

/// SQLite's progress handler during a merge step: non-zero interrupts the running statement.
private func mergeProgress(_ context: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<Merger>.fromOpaque(context!).takeUnretainedValue().shouldAbandon ? 1 : 0
}

/// Walks the newest entry of each id of a merge's memtables, in id order.
///
/// The memtables' sorted entries are concatenated, newest memtable first, as (id prefix,
/// entry) pairs in one allocation and sorted once by id: the sort finds the runs already in
/// order and merges them, and compares integers unless two ids share eight bytes beyond what
/// every id shares. Equal ids then sit together, newest first.
///
/// A value: copying it saves a position to go back to; copies share the sorted pairs.
struct MergeCursor {
    private let keys: SortedKeys
    private var position = 0

    /// - Precondition: every memtable is sorted (`sortedLatest`).
    init(_ memtables: [Memtable]) {
        keys = SortedKeys(memtables)
    }

    var isAtEnd: Bool { position == keys.count }

    /// The next id's newest entry, or nil at the end.
    mutating func next() -> MemtableEntry? {
        guard position < keys.count else { return nil }
        let key = keys[position]
        let entry = MemtableEntry(key.entry)
        position += 1
        while position < keys.count, keys[position].prefix == key.prefix,
              bytesEqual(MemtableEntry(keys[position].entry).userId, entry.userId) {
            position += 1
        }
        return entry
    }
}

/// A merge's entries as (id prefix, entry) pairs sorted by id, the newest memtable's first
/// among equal ids. The prefix is eight bytes of the id after what every id of the merge
/// shares.
///
/// Read-only once made; the memtables it points into must outlive it (the merge holds them).
final class SortedKeys: @unchecked Sendable {
    struct Key {
        var prefix: UInt64
        var entry: UnsafeMutableRawPointer
    }

    private let keys: UnsafeMutableBufferPointer<Key>
    let count: Int

    init(_ memtables: [Memtable]) {
        count = memtables.reduce(0) { $0 + $1.sortedLatest!.count }
        keys = .allocate(capacity: max(count, 1))
        // Each memtable's ids lie between its first and last, so they share what those two
        // share with any one id of the merge.
        var shared = Int.max
        var reference: UnsafeRawBufferPointer?
        for memtable in memtables {
            guard let first = memtable.sortedLatest!.first, let last = memtable.sortedLatest!.last else { continue }
            let lowest = memtable.entry(at: first).userId, highest = memtable.entry(at: last).userId
            if reference == nil { reference = lowest }
            shared = min(commonPrefixCount(reference!, lowest, atMost: shared),
                         commonPrefixCount(reference!, highest, atMost: shared))
        }
        var at = 0
        // Newest first: the sort is stable, so among equal ids the newest stays in front.
        for memtable in memtables.reversed() {
            for offset in memtable.sortedLatest! {
                let entry = memtable.entry(at: offset)
                keys[at] = Key(prefix: idPrefix(entry.userId, from: shared), entry: entry.base)
                at += 1
            }
        }
        var filled = UnsafeMutableBufferPointer(rebasing: keys[0..<count])
        filled.sort { a, b in
            if a.prefix != b.prefix { return a.prefix < b.prefix }
            return compareIds(MemtableEntry(a.entry).userId, MemtableEntry(b.entry).userId) < 0
        }
    }

    deinit { keys.deallocate() }

    @inline(__always)
    subscript(_ position: Int) -> Key { keys[position] }
}
