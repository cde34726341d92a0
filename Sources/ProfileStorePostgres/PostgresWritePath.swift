import Glibc
import ProfilePostgres
import ProfileStore
import ProfileSystem
import Synchronization

/// The server's writes into the shared store: each group commit is one PostgreSQL
/// transaction, in two round trips (libpq's pipeline mode).
///
/// A commit takes an advisory lock on the hash of every id it touches, in hash order, so that
/// two nodes' commits over the same ids wait for each other instead of deadlocking (a
/// deadlock with another program's plain SQL is retried inside); reads the rows as they are;
/// works every operation out in order, in memory, as the SQLite write path does; and writes
/// what changed in one statement of each kind: an upsert of every profile that ends up
/// present, with write sequences drawn in operation order (so later triples of an
/// MSET are newer for RECENT), and a delete of those that end up absent. A commit whose
/// connection breaks during COMMIT asks PostgreSQL what became of its transaction
/// (`txid_status`) before answering.
///
/// Threading: the writer thread.
final class PostgresWritePath: ProfileWritePath, @unchecked Sendable {
    private let store: PostgresProfileStore
    private var connection: PostgresConnection?
    /// Why the last commit failed; nil once one commits. Its own lock: /healthz reads it.
    private let commitRefusal = Mutex<WriteRefusal?>(nil)

    init(store: PostgresProfileStore) {
        self.store = store
    }

    var rowCount: Int { store.rowCount }

    /// Never: every commit is a round trip to PostgreSQL.
    var commitsPromptly: Bool { false }

    /// Other nodes write the same table.
    var cacheAfterCommit: CacheAfterCommit { .invalidate }

    /// The write buffer's counters are a local store's; a shared store has none.
    var statistics: WritePathStatistics { WritePathStatistics() }

    /// PostgreSQL out of reach, else the last commit's failure (a permission taken away, a
    /// full disk on its side), until a commit goes through.
    var writeRefusal: WriteRefusal? {
        if let reason = store.unreachableReason { return WriteRefusal(label: "unreachable", reason: reason) }
        return commitRefusal.withLock { $0 }
    }

    func close() throws {
        dropConnection()
    }

    /// Closes the connection, once the store no longer takes its backend for this server's.
    private func dropConnection() {
        guard let connection else { return }
        store.writerClosing(connection.backendPID)
        connection.close()
        self.connection = nil
    }

    func commit(_ units: [any WriteUnit], knownProfile: (UnsafeRawBufferPointer) -> KnownProfile,
                report: (Int, WriteResult) -> Void) {
        let deadline = monotonicNanos() + PostgresProfileStore.statementNanos
        switch commitRetrying(units, deadline: deadline) {
        case .success(let planned):
            accept()
            planned.report(report)
        case .failure(let error) where units.count > 1 && error.kind == .other:
            // The server refused something of one unit: the others go in without it.
            for (index, unit) in units.enumerated() {
                switch commitRetrying([unit], deadline: monotonicNanos() + PostgresProfileStore.statementNanos) {
                case .success(let planned):
                    accept()
                    planned.report { _, result in report(index, result) }
                case .failure(let error):
                    refuse(error)
                    report(index, .failed(error))
                }
            }
        case .failure(let error):
            refuse(error)
            for index in units.indices { report(index, .failed(error)) }
        }
    }

    private func refuse(_ error: StoreError) {
        let refusal = WriteRefusal(error)
        commitRefusal.withLock { $0 = refusal }
    }

    private func accept() {
        commitRefusal.withLock { if $0 != nil { $0 = nil } }
    }

    /// Commits, again after a deadlock or a serialization failure, until the deadline.
    private func commitRetrying(_ units: [any WriteUnit], deadline: Int) -> Result<PlannedCommit, StoreError> {
        while true {
            do {
                return .success(try commitOnce(units, deadline: deadline))
            } catch let error as PostgresError {
                if let sqlstate = error.sqlstate, sqlstate == "40P01" || sqlstate == "40001", monotonicNanos() < deadline {
                    continue
                }
                if error.sqlstate == nil {
                    dropConnection()
                    store.noteReachable(false, error.description)
                }
                return .failure(store.storeError(error))
            } catch let outcome as CommitOutcomeError {
                return .failure(outcome.error)
            } catch {
                preconditionFailure("a commit failed with \(error)")
            }
        }
    }

    private func connected(deadline: Int) throws(PostgresError) -> PostgresConnection {
        if let connection, !connection.isBroken { return connection }
        dropConnection()
        let opened = try store.connect("profiled", deadline: deadline)
        store.writerConnected(opened.backendPID)
        connection = opened
        return opened
    }

    /// Two round trips: BEGIN, the locks and the rows as they are, in one pipeline; then,
    /// once the plan is worked out, the writes and COMMIT in another. A commit of puts alone
    /// needs no row to work out what to write: it reads none, and its upsert returns the
    /// profiles it created, so the others existed (reading the rows was a third of
    /// PostgreSQL's time per SET, as pg_stat_statements measured it).
    private func commitOnce(_ units: [any WriteUnit], deadline: Int) throws -> PlannedCommit {
        let connection = try connected(deadline: deadline)
        var plan = PlannedCommit(units)
        var reads: [(sql: String, parameters: [[UInt8]?])] = [("BEGIN", [])]
        if plan.ids.isEmpty {
            reads.append(("SELECT txid_current()", []))
        } else {
            let literal = plan.idsLiteral
            // The locks are taken in hash order, as the aggregate reads its ordered input; the
            // rows are read by the next statement, whose snapshot comes after the locks.
            reads.append(("""
                SELECT txid_current(), (SELECT count(pg_advisory_xact_lock($1::int, hash))
                    FROM (SELECT DISTINCT hashtext(id) AS hash FROM unnest($2::text[]) AS id ORDER BY 1) AS hashes)
                """, [Array(String(PostgresSchema.rowLockNamespace).utf8), literal]))
            if !plan.isPutsOnly {
                // A join of the ids probes the primary key once each; `= ANY` of a large array
                // measured several times slower.
                reads.append(("SELECT user_id, name, portrait_uri FROM unnest($1::text[]) AS wanted (id) JOIN profiles ON user_id = id",
                              [literal]))
            }
        }
        let transaction: String
        do {
            let results = try connection.pipeline(reads, deadline: deadline)
            transaction = results[1].string(0, 0) ?? ""
            if results.count > 2 {
                let rows = results[2]
                for row in 0..<rows.rowCount {
                    withRow(rows, row) { profile in plan.found(profile) }
                }
            }
        } catch {
            if !connection.isBroken { try? connection.execute("ROLLBACK", deadline: deadline) }
            throw error
        }
        // Puts alone are worked out with nothing known of the rows: which profiles the upsert
        // created comes back from it, and completes their outcomes.
        plan.work()
        var writes: [(sql: String, parameters: [[UInt8]?])] = []
        if plan.clears { writes.append(("TRUNCATE profiles", [])) }
        let present = plan.presentAfter
        if !present.isEmpty {
            // Sequences are drawn row by row after the sort, so in operation order. A commit of
            // puts alone is told which profiles the upsert created (a row it updated carries the
            // updating transaction in xmax; a new one has none): usually none, where a row of
            // reply for every row written cost both sides a parse.
            let upsert = """
                INSERT INTO profiles (user_id, name, portrait_uri, seq)
                SELECT id, name, portrait_uri, nextval('profiles_seq')
                FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS written (id, name, portrait_uri, position)
                ORDER BY position
                ON CONFLICT (user_id) DO UPDATE
                SET name = EXCLUDED.name, portrait_uri = EXCLUDED.portrait_uri, seq = EXCLUDED.seq
                """
            writes.append((plan.isPutsOnly ? "WITH upserted AS (\(upsert)\nRETURNING user_id, xmax = 0 AS created)\n"
                               + "SELECT user_id FROM upserted WHERE created" : upsert,
                           plan.upsertParameters(present)))
        }
        let removed = plan.removedAfter
        if !removed.isEmpty {
            writes.append(("DELETE FROM profiles WHERE user_id = ANY($1::text[])", [plan.literal(of: removed)]))
        }
        writes.append(("COMMIT", []))
        let results = try finish(connection, writes, transaction: transaction, deadline: deadline)
        if plan.isPutsOnly && !plan.ids.isEmpty {
            if let created = results?.first {
                plan.existedBut(created: created)
            } else {
                // Committed, but the upsert's answer was lost with the connection: which
                // profiles existed is not known, and the row count waits for the next count.
                plan.existedAll()
            }
        }
        if plan.clears {
            store.setRowCount(plan.presentAfter.count)
        } else {
            store.adjustRowCount(by: plan.rowCountChange)
        }
        store.noteReachable(true)
        return plan
    }

    /// The writes and COMMIT, and their results; when the connection breaks meanwhile, what
    /// became of the transaction, since COMMIT may have run (nil results: it did).
    private func finish(_ connection: PostgresConnection, _ writes: [(sql: String, parameters: [[UInt8]?])],
                        transaction: String, deadline: Int) throws -> [PostgresResult]? {
        let failure: PostgresError
        do {
            return try connection.pipeline(writes, deadline: deadline)
        } catch {
            failure = error
        }
        guard failure.kind == .connectionLost || failure.kind == .timeout else {
            // Refused: COMMIT was skipped, and the transaction is rolled back here.
            if !connection.isBroken { try? connection.execute("ROLLBACK", deadline: deadline) }
            throw failure
        }
        dropConnection()
        switch status(of: transaction) {
        case "committed": return nil
        case "aborted": throw failure
        default:
            throw CommitOutcomeError(error: StoreError(
                kind: .outcomeUnknown,
                message: "the connection to PostgreSQL at \(store.description) broke during COMMIT and the outcome could not be found out: \(failure)",
                path: store.description,
                clientReason: "outcome unknown: the connection to the shared store broke during COMMIT; the write may or may not have been applied"))
        }
    }

    /// What PostgreSQL says became of `transaction` (`committed`, `aborted`), asked on new
    /// connections for up to 5 s; nil when it could not be found out.
    private func status(of transaction: String) -> String? {
        let decided = monotonicNanos() + PostgresProfileStore.statementNanos
        while monotonicNanos() < decided {
            var answer: String? = nil
            do throws(PostgresError) {
                let asking = try store.connect("profiled", deadline: decided)
                defer { asking.close() }
                answer = try asking.query("SELECT txid_status($1::bigint)", [Array(transaction.utf8)], deadline: decided)
                    .string(0, 0)
            } catch {
                usleep(50_000)
                continue
            }
            if answer == "committed" || answer == "aborted" { return answer }
            usleep(10_000)
        }
        return nil
    }
}

/// A commit whose outcome is unknown.
private struct CommitOutcomeError: Error {
    var error: StoreError
}

/// One group commit worked out in memory: the ids it touches, their rows as PostgreSQL had
/// them, each operation's outcome, and what to write.
///
/// Every id, value and row read lies once in `bytes`, and everything about an id is kept in
/// arrays at its index, found once per operation through a `KeyIndex`: the plan runs on every
/// SET, and an array per id and value, hashed in dictionaries, was most of the node's own CPU
/// per SET over PostgreSQL (callgrind).
///
/// Threading: the writer thread.
private struct PlannedCommit {
    /// A profile's fields, as ranges of `bytes`.
    struct Row {
        var name: Range<Int>
        var portraitUri: Range<Int>
    }
    let units: [any WriteUnit]
    /// Ids, values and rows read, at the ranges kept below; outcomes point into it too.
    private var bytes: [UInt8] = []
    /// Distinct ids as ranges of `bytes`, in the order they first appear.
    private(set) var ids: [Range<Int>] = []
    private var index = KeyIndex()
    /// Each operation's id index, in unit order (-1 for a removal of everything).
    private var operationIds: [Int] = []
    /// Rows as PostgreSQL had them, by id index.
    private var existing: [Row?] = []
    /// PostgreSQL had the id, whose fields were not read (a commit of puts alone).
    private var existingUnread: [Bool] = []
    /// Whether an operation has changed the id so far, and what it left (nil: absent); ids
    /// not changed are as `existing` has them, or absent once `clears`.
    private var changed: [Bool] = []
    private var current: [Row?] = []
    /// The serial of the last operation that wrote each id (0: none), for the order of write
    /// sequences.
    private var lastWrite: [Int] = []
    /// The outcome of the first operation on each id, whose state before is the row's as
    /// PostgreSQL had it.
    private var firstOutcome: [Int] = []
    private(set) var clears = false
    /// Every operation is a put: what to write does not depend on the rows as they are.
    private(set) var isPutsOnly = true
    /// Each operation's outcome, in unit order; rows after lie in `bytes`.
    private var outcomes: [OperationOutcome] = []
    private var unitStarts: [Int] = []

    init(_ units: [any WriteUnit]) {
        self.units = units
        var operations = 0
        for unit in units { operations += unit.operationCount }
        index.reset(forKeys: operations)
        operationIds.reserveCapacity(operations)
        for unit in units {
            for index in 0..<unit.operationCount {
                let operation = unit.operation(at: index)
                if case .put = operation {} else { isPutsOnly = false }
                guard let userId = operation.userId else {
                    operationIds.append(-1)
                    continue
                }
                operationIds.append(adding(userId))
            }
        }
        existing = Array(repeating: nil, count: ids.count)
        existingUnread = Array(repeating: false, count: ids.count)
        changed = Array(repeating: false, count: ids.count)
        current = Array(repeating: nil, count: ids.count)
        lastWrite = Array(repeating: 0, count: ids.count)
        firstOutcome = Array(repeating: -1, count: ids.count)
    }

    private func position(of userId: UnsafeRawBufferPointer) -> KeyIndex.Position {
        bytes.withUnsafeBytes { raw in index.find(userId) { UnsafeRawBufferPointer(rebasing: raw[ids[$0]]) } }
    }

    /// The index of `userId`, which it gets now if it has none.
    private mutating func adding(_ userId: UnsafeRawBufferPointer) -> Int {
        let position = position(of: userId)
        if let known = position.number { return known }
        index.set(position, to: ids.count)
        ids.append(append(userId))
        return ids.count - 1
    }

    var idsLiteral: [UInt8] { literal(of: ids.indices) }

    /// The text array of the ids at `indices`.
    func literal<Indices: Collection<Int>>(of indices: Indices) -> [UInt8] {
        literal(indices.lazy.map { ids[$0] })
    }

    private func literal<Ranges: Collection<Range<Int>>>(_ ranges: Ranges) -> [UInt8] {
        bytes.withUnsafeBytes { raw in PostgresArray.textLiteral(ranges.lazy.map { UnsafeRawBufferPointer(rebasing: raw[$0]) }) }
    }

    mutating func found(_ row: ProfileRow) {
        guard let index = position(of: row.userId).number else { return }
        existing[index] = Row(name: append(row.name), portraitUri: append(row.portraitUri))
    }

    /// After `work`, for a commit of puts alone: PostgreSQL had every profile but those the
    /// upsert created (`created`), and their fields were not read. The first operation on each
    /// found it present; its fields are reported as filled, as the SQLite store does when only
    /// a profile's presence is known.
    mutating func existedBut(created: PostgresResult) {
        var wasCreated = Array(repeating: false, count: ids.count)
        for row in 0..<created.rowCount {
            created.withValue(row, 0) { userId in
                guard let userId else { return }
                if let index = position(of: userId).number { wasCreated[index] = true }
            }
        }
        for index in ids.indices where !wasCreated[index] { markExisted(index) }
    }

    /// After `work`, for a commit of puts alone: every id is taken to have existed, since the
    /// commit went through and what the upsert returned was lost.
    mutating func existedAll() {
        for index in ids.indices { markExisted(index) }
    }

    private mutating func markExisted(_ index: Int) {
        existingUnread[index] = true
        if firstOutcome[index] >= 0 { outcomes[firstOutcome[index]].before = .present(hasName: true, hasPortraitUri: true) }
    }

    private func now(_ index: Int) -> Row? {
        if changed[index] { return current[index] }
        return clears ? nil : existing[index]
    }

    private static func state(_ row: Row?) -> ProfileState {
        guard let row else { return .absent }
        return .present(hasName: !row.name.isEmpty, hasPortraitUri: !row.portraitUri.isEmpty)
    }

    /// Works every operation out in order.
    mutating func work() {
        var serial = 0
        for unit in units {
            unitStarts.append(outcomes.count)
            for index in 0..<unit.operationCount {
                apply(unit.operation(at: index), id: operationIds[serial], serial: serial + 1)
                serial += 1
            }
        }
    }

    private mutating func apply(_ operation: WriteOperation, id index: Int, serial: Int) {
        func record(before: ProfileState, after: Row?, changed: Bool) {
            let userId = after != nil || changed ? ids[index] : 0..<0
            if firstOutcome[index] < 0 { firstOutcome[index] = outcomes.count }
            outcomes.append(OperationOutcome(before: before, exists: after != nil, changed: changed, userId: userId,
                                             name: after?.name ?? 0..<0, portraitUri: after?.portraitUri ?? 0..<0))
            if changed {
                self.changed[index] = true
                current[index] = after
                lastWrite[index] = serial
            }
        }
        switch operation {
        case .put(_, let name, let portraitUri):
            record(before: Self.state(now(index)), after: Row(name: append(name), portraitUri: append(portraitUri)),
                   changed: true)
        case .patch(_, let nameEdit, let portraitUriEdit, let createsMissing, let removesEmptied):
            let old = now(index)
            guard old != nil || createsMissing else {
                return record(before: .absent, after: nil, changed: false)
            }
            func edit(_ edit: FieldEdit, _ value: Range<Int>) -> (Range<Int>, Bool) {
                switch edit {
                case .keep: (value, false)
                case .set(let new): (append(new), true)
                case .setIfEmpty(let new): value.isEmpty ? (append(new), true) : (value, false)
                }
            }
            let (name, nameChanged) = edit(nameEdit, old?.name ?? 0..<0)
            let (portraitUri, portraitUriChanged) = edit(portraitUriEdit, old?.portraitUri ?? 0..<0)
            if removesEmptied && name.isEmpty && portraitUri.isEmpty {
                return record(before: Self.state(old), after: nil, changed: old != nil)
            }
            let changed = nameChanged || portraitUriChanged || old == nil
            record(before: Self.state(old), after: Row(name: name, portraitUri: portraitUri), changed: changed)
        case .remove:
            let old = now(index)
            record(before: Self.state(old), after: nil, changed: old != nil)
        case .read:
            let old = now(index)
            record(before: Self.state(old), after: old, changed: false)
        case .removeAll:
            clears = true
            for id in ids.indices {
                changed[id] = false
                current[id] = nil
                lastWrite[id] = 0
            }
            outcomes.append(OperationOutcome(before: .absent, exists: false, changed: true, userId: 0..<0, name: 0..<0,
                                             portraitUri: 0..<0))
        }
    }

    private mutating func append(_ value: UnsafeRawBufferPointer) -> Range<Int> {
        let start = bytes.count
        bytes.append(contentsOf: value)
        return start..<bytes.count
    }

    /// Ids written that end up present, by their last write: the order write sequences go in.
    var presentAfter: [Int] {
        ids.indices.filter { changed[$0] && current[$0] != nil }.sorted { lastWrite[$0] < lastWrite[$1] }
    }

    /// Ids that end up absent and that PostgreSQL has (after a TRUNCATE, none).
    var removedAfter: [Int] {
        guard !clears else { return [] }
        return ids.indices.filter { changed[$0] && current[$0] == nil && existing[$0] != nil }
    }

    /// The upsert's three arrays, `present` in order.
    func upsertParameters(_ present: [Int]) -> [[UInt8]?] {
        [
            literal(of: present),
            literal(present.lazy.map { current[$0]!.name }),
            literal(present.lazy.map { current[$0]!.portraitUri }),
        ]
    }

    /// How the table's row count changed, when it was not emptied.
    var rowCountChange: Int {
        var change = 0
        for index in ids.indices {
            let existed = existing[index] != nil || existingUnread[index]
            if existed != (now(index) != nil) { change += existed ? -1 : 1 }
        }
        return change
    }

    /// Reports each unit's outcomes.
    func report(_ report: (Int, WriteResult) -> Void) {
        bytes.withUnsafeBytes { raw in
            outcomes.withUnsafeBufferPointer { all in
                for (index, start) in unitStarts.enumerated() {
                    let end = index + 1 < unitStarts.count ? unitStarts[index + 1] : all.count
                    let states = UnsafeBufferPointer(rebasing: all[start..<end])
                    report(index, .committed(WriteOutcomes(states, bytes: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!)))
                }
            }
        }
    }
}
