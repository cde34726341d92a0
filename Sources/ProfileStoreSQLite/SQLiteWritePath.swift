import Glibc
import ProfileStore
import ProfileSystem
import Synchronization
import WireBytes

/// The SQLite store's write path: group commits appended to the write log, made visible in the
/// write buffer, and merged into the table by the merger's thread.
///
/// A commit works out, for each operation in order, what the profile is at that point (from
/// the commit's own earlier operations, the buffer, what the caller knows, or the table), logs
/// what changes as one frame, and only once the frame is written puts its entries into the
/// buffer, where reads find them. A frame that cannot be written changes nothing. While
/// merges lag, commits are held back a little, more the fuller the buffer (`holdBack`), so
/// that writers slow down smoothly instead of meeting a wall.
///
/// Threading: `commit` and `close` on one thread at a time (the server's writer thread); the
/// counters from any thread.
final class SQLiteWritePath: ProfileWritePath, @unchecked Sendable {
    private let file: StoreFile
    /// Internal, not private: tests look at its memtables.
    let buffer: WriteBuffer
    private let log: WriteLogWriter
    private let merger: Merger
    private var mergerThread: pthread_t?
    private var sorterThread: pthread_t?
    /// Reads the table for profiles nobody else knows.
    private let reader: SQLiteProfileReader
    private let frame = LogFrame()
    /// Values read for operations that do not log them (reads, the fields a patch keeps).
    private let side = ByteScratch()
    private var outcomes: [OperationOutcome] = []
    private var overlay = GroupOverlay()
    private var nextSequence: Int64
    private let rows: Atomic<Int>
    private let delayedCommits = Atomic<Int>(0)
    private let delayNanos = Atomic<Int>(0)
    /// How long a commit waits for room in a full buffer before it fails.
    private let fullBufferTimeoutNanos: Int
    /// Why the last commit failed; nil once one commits. Its own lock: /healthz reads it.
    private let commitRefusal = Mutex<WriteRefusal?>(nil)

    init(file: StoreFile, buffer: WriteBuffer, log: WriteLogWriter, merger: Merger, reader: SQLiteProfileReader,
         nextSequence: Int64, rows: Int) {
        self.file = file
        self.buffer = buffer
        self.log = log
        self.merger = merger
        self.reader = reader
        self.nextSequence = nextSequence
        self.rows = Atomic(rows)
        fullBufferTimeoutNanos = Int(file.busyTimeoutMilliseconds) * 1_000_000
        let merger = self.merger
        mergerThread = startThread("merger") { merger.run() }
        sorterThread = startThread("sorter") { merger.runSorter() }
    }

    var rowCount: Int { rows.load(ordering: .acquiring) }

    /// Prompt while commits are not held back (the buffer is under half its limit) and the log
    /// is synced in the background, not at each commit.
    /// The store file has one writer: this server.
    var cacheAfterCommit: CacheAfterCommit { .update }

    var commitsPromptly: Bool {
        log.syncer != nil && 2 * buffer.currentBytes.load(ordering: .relaxed) < buffer.limitBytes
    }

    var statistics: WritePathStatistics {
        var statistics = WritePathStatistics()
        (statistics.unmergedWrites, statistics.bufferBytes) = buffer.occupancy
        statistics.bufferLimitBytes = buffer.limitBytes
        statistics.delayedCommits = delayedCommits.load(ordering: .relaxed)
        statistics.delayNanoseconds = delayNanos.load(ordering: .relaxed)
        statistics.merges = merger.merges.load(ordering: .relaxed)
        statistics.mergedRows = merger.mergedRows.load(ordering: .relaxed)
        statistics.abandonedMergeSteps = merger.abandonedSteps.load(ordering: .relaxed)
        statistics.logSyncs = log.syncer?.completedSyncs.load(ordering: .relaxed) ?? 0
        return statistics
    }

    var writeRefusal: WriteRefusal? {
        if let refusal = commitRefusal.withLock({ $0 }) { return refusal }
        if let error = log.syncer?.failure { return WriteRefusal(log.syncFailure(error)) }
        guard let failure = merger.lastFailure else { return nil }
        return WriteRefusal(label: "merge_failing", reason: "merging the write log into the table fails: \(failure)")
    }

    func close() throws {
        merger.stop()
        if let mergerThread { pthread_join(mergerThread, nil) }
        if let sorterThread { pthread_join(sorterThread, nil) }
        mergerThread = nil
        sorterThread = nil
        let left = buffer.occupancy.entries
        let failure = merger.lastFailure
        // What the merger could not merge stays in the log for the next open to merge.
        guard left == 0 else {
            throw StoreError(kind: .other, resultCode: 1, message: "\(left) writes were left unmerged: \(failure ?? "")",
                             path: file.path)
        }
        log.closeAndRemoveAll()
        try merger.checkpoint()
        file.removeLockFile()
    }

    // MARK: Committing

    func commit(_ units: [any WriteUnit], knownProfile: (UnsafeRawBufferPointer) -> KnownProfile,
                report: (Int, WriteResult) -> Void) {
        if let error = holdBack() {
            refuse(error)
            for index in units.indices { report(index, .failed(error)) }
            return
        }
        guard let error = commitGroup(units, knownProfile: knownProfile, report: report) else { return accept() }
        guard units.count > 1 else {
            refuse(error)
            report(0, .failed(error))
            return
        }
        // Each unit on its own: one that writes nothing (a DEL of a missing id) commits, and
        // each of the others learns its own outcome.
        for (index, unit) in units.enumerated() {
            if let error = commitGroup([unit], knownProfile: knownProfile, report: { _, result in report(index, result) }) {
                refuse(error)
                report(index, .failed(error))
            } else {
                accept()
            }
        }
    }

    private func refuse(_ error: StoreError) {
        let refusal = WriteRefusal(error)
        commitRefusal.withLock { $0 = refusal }
    }

    private func accept() {
        commitRefusal.withLock { if $0 != nil { $0 = nil } }
    }

    /// Commits `units` as one frame and reports each, or reports nothing and returns why the
    /// frame could not be written (nothing of it changed anything).
    private func commitGroup(_ units: [any WriteUnit], knownProfile: (UnsafeRawBufferPointer) -> KnownProfile,
                             report: (Int, WriteResult) -> Void) -> StoreError? {
        var operations = 0
        for unit in units { operations += unit.operationCount }
        outcomes.removeAll(keepingCapacity: true)
        outcomes.reserveCapacity(operations)
        overlay.reset(forOperations: operations)
        side.removeAll()
        frame.begin(firstSequence: nextSequence)
        var count = rowCount
        prefetchIndexSlots(units)
        // The table lookups of this commit share one read transaction (`lookupRow`); it ends
        // with the commit, so that it never holds a checkpoint back for long.
        defer { reader.endRead() }
        do {
            for unit in units {
                for index in 0..<unit.operationCount {
                    outcomes.append(try execute(unit.operation(at: index), count: &count, knownProfile: knownProfile))
                }
            }
            if frame.operationCount > 0 {
                frame.seal()
                try log.append(frame.bytes, lastSequence: frame.nextSequence - 1)
            }
        } catch {
            // Nothing is in the log, so nothing changed.
            return error
        }
        if frame.operationCount > 0 {
            publishFrame()
            nextSequence = frame.nextSequence
            rows.store(count, ordering: .releasing)
        }
        outcomes.withUnsafeBufferPointer { all in
            var first = 0
            for (index, unit) in units.enumerated() {
                let states = UnsafeBufferPointer(rebasing: all[first..<first + unit.operationCount])
                report(index, .committed(WriteOutcomes(states, bytes: frame.storage, side: side.base)))
                first += unit.operationCount
            }
        }
        return nil
    }

    /// Starts loading the buffer's index slots that the commit's lookups read first, all of
    /// them before the first lookup, so that their memory misses overlap.
    private func prefetchIndexSlots(_ units: [any WriteUnit]) {
        buffer.prefetchIndexSlots { prefetch in
            for unit in units {
                for index in 0..<unit.operationCount {
                    if let userId = unit.operation(at: index).userId { prefetch(userId) }
                }
            }
        }
    }

    /// Puts the frame's operations into the buffer, where reads find them from now on.
    private func publishFrame() {
        let frame = self.frame
        let froze = buffer.appendCommitted(count: frame.operationCount, firstSequence: frame.firstSequence,
                                           now: monotonicNanos()) { apply in frame.forEachOperation(apply) }
        if froze { merger.memtableFroze() }
    }

    /// Works one operation out against the profile as it is at this point of the commit.
    private func execute(_ operation: WriteOperation, count: inout Int,
                         knownProfile: (UnsafeRawBufferPointer) -> KnownProfile) throws(StoreError) -> OperationOutcome {
        switch operation {
        case .put(let userId, let name, let portraitUri):
            let before = try current(userId, values: false, knownProfile)
            if !before.state.exists { count += 1 }
            return logPut(userId, name, portraitUri, before: before.state)

        case .patch(let userId, let nameEdit, let portraitUriEdit, let createsMissing, let removesEmptied):
            let before = try current(userId, values: true, knownProfile)
            guard before.state.exists || createsMissing else {
                return OperationOutcome(before: .absent, exists: false, changed: false, inSide: false,
                                        userId: 0..<0, name: 0..<0, portraitUri: 0..<0)
            }
            let empty = UnsafeRawBufferPointer(start: nil, count: 0)
            let oldName = before.state.exists ? before.name : empty
            let oldPortraitUri = before.state.exists ? before.portraitUri : empty
            let (name, nameChanged) = apply(nameEdit, to: oldName)
            let (portraitUri, portraitUriChanged) = apply(portraitUriEdit, to: oldPortraitUri)
            if removesEmptied && name.count == 0 && portraitUri.count == 0 {
                guard before.state.exists else {
                    return OperationOutcome(before: .absent, exists: false, changed: false, inSide: false,
                                            userId: 0..<0, name: 0..<0, portraitUri: 0..<0)
                }
                count -= 1
                return logRemoval(userId, before: before.state)
            }
            guard nameChanged || portraitUriChanged || !before.state.exists else {
                // Nothing to write: the profile stays as it is.
                let kept = side.append(userId, oldName, oldPortraitUri)
                return OperationOutcome(before: before.state, exists: true, changed: false, inSide: true,
                                        userId: kept.0, name: kept.1, portraitUri: kept.2)
            }
            if !before.state.exists { count += 1 }
            return logPut(userId, name, portraitUri, before: before.state)

        case .remove(let userId):
            let before = try current(userId, values: false, knownProfile)
            guard before.state.exists else {
                return OperationOutcome(before: .absent, exists: false, changed: false, inSide: false,
                                        userId: 0..<0, name: 0..<0, portraitUri: 0..<0)
            }
            count -= 1
            return logRemoval(userId, before: before.state)

        case .read(let userId):
            let before = try current(userId, values: true, knownProfile)
            guard before.state.exists else { return .none }
            let kept = side.append(userId, before.name, before.portraitUri)
            return OperationOutcome(before: before.state, exists: true, changed: false, inSide: true,
                                    userId: kept.0, name: kept.1, portraitUri: kept.2)

        case .removeAll:
            frame.append(.removeAll, userId: UnsafeRawBufferPointer(start: nil, count: 0))
            overlay.clearAll()
            count = 0
            var outcome = OperationOutcome.none
            outcome.changed = true
            return outcome
        }
    }

    /// A field after an edit, and whether the edit wrote it.
    private func apply(_ edit: FieldEdit, to old: UnsafeRawBufferPointer) -> (UnsafeRawBufferPointer, Bool) {
        switch edit {
        case .keep: (old, false)
        case .set(let value): (value, true)
        case .setIfEmpty(let value): old.count == 0 ? (value, true) : (old, false)
        }
    }

    private func logPut(_ userId: UnsafeRawBufferPointer, _ name: UnsafeRawBufferPointer,
                        _ portraitUri: UnsafeRawBufferPointer, before: ProfileState) -> OperationOutcome {
        let ranges = frame.append(.put, userId: userId, name: name, portraitUri: portraitUri)
        overlay.record(userId, outcome: outcomes.count, frame: frame, outcomes: outcomes)
        return OperationOutcome(before: before, exists: true, changed: true, inSide: false,
                                userId: ranges.userId, name: ranges.name, portraitUri: ranges.portraitUri)
    }

    private func logRemoval(_ userId: UnsafeRawBufferPointer, before: ProfileState) -> OperationOutcome {
        let ranges = frame.append(.removal, userId: userId)
        overlay.record(userId, outcome: outcomes.count, frame: frame, outcomes: outcomes)
        return OperationOutcome(before: before, exists: false, changed: true, inSide: false,
                                userId: ranges.userId, name: 0..<0, portraitUri: 0..<0)
    }

    /// The profile as it is now, in this commit: its state, and its fields when asked for
    /// (views valid until the next operation).
    private struct Current {
        var state: ProfileState
        var name = UnsafeRawBufferPointer(start: nil, count: 0)
        var portraitUri = UnsafeRawBufferPointer(start: nil, count: 0)
    }

    /// Looks in this commit's own operations, then the buffer, then what the caller knows, then
    /// the table: each knows every write the ones after it lack.
    private func current(_ userId: UnsafeRawBufferPointer, values: Bool,
                         _ knownProfile: (UnsafeRawBufferPointer) -> KnownProfile) throws(StoreError) -> Current {
        if let index = overlay.outcome(of: userId, frame: frame, outcomes: outcomes) {
            let outcome = outcomes[index]
            guard outcome.exists else { return Current(state: .absent) }
            let name = frame.view(outcome.name), portraitUri = frame.view(outcome.portraitUri)
            return found(name, portraitUri)
        }
        if overlay.isCleared { return Current(state: .absent) }
        let epoch: Int
        switch buffer.lookUp(userId, { entry in
            guard let row = entry.row else { return Current(state: .absent) }
            return values ? copied(row) : found(row.name, row.portraitUri)
        }) {
        case .found(let current):
            return current
        case .notHere(let tableCleared, let dropEpoch):
            if tableCleared { return Current(state: .absent) }
            epoch = dropEpoch
        }
        switch knownProfile(userId) {
        case .absent:
            return Current(state: .absent)
        case .present(let row?):
            return values ? copied(row) : found(row.name, row.portraitUri)
        case .present(nil) where !values:
            // Its fields are not needed; whether they are empty is, for the reply.
            return Current(state: .present(hasName: true, hasPortraitUri: true))
        case .present(nil), .unknown:
            break
        }
        return try reader.lookupRow(userId, epoch: epoch) { row in
            guard let row else { return Current(state: .absent) }
            return values ? copied(row) : found(row.name, row.portraitUri)
        }
    }

    private func found(_ name: UnsafeRawBufferPointer, _ portraitUri: UnsafeRawBufferPointer) -> Current {
        Current(state: .present(hasName: name.count > 0, hasPortraitUri: portraitUri.count > 0),
                name: name, portraitUri: portraitUri)
    }

    private func copied(_ row: ProfileRow) -> Current {
        let ranges = side.append(row.userId, row.name, row.portraitUri)
        return found(side.view(ranges.1), side.view(ranges.2))
    }

    // MARK: Backpressure

    /// Holds the commit back while merges lag: not at all below half the buffer's limit, then
    /// longer the fuller it is (up to `maximumDelayNanos` just below the limit); at the limit,
    /// until a merge makes room, and at most `fullBufferTimeoutNanos` before failing.
    private func holdBack() -> StoreError? {
        let limit = buffer.limitBytes
        let bytes = buffer.currentBytes.load(ordering: .relaxed)
        guard 2 * bytes >= limit else { return nil }
        let started = monotonicNanos()
        defer {
            delayedCommits.add(1, ordering: .relaxed)
            delayNanos.add(monotonicNanos() - started, ordering: .relaxed)
        }
        if bytes < limit {
            let share = Double(2 * bytes - limit) / Double(limit)
            let nanos = Int(share * share * Double(Self.maximumDelayNanos))
            if nanos > 0 { usleep(useconds_t(nanos / 1000)) }
            return nil
        }
        guard buffer.waitForRoom(until: started + fullBufferTimeoutNanos) else {
            let waited = monotonicNanos() - started
            let why = merger.lastFailure.map { "merging it into the table fails: \($0)" } ?? "merging cannot keep up"
            let message = "the write buffer stayed full for \(waited / 1_000_000) ms: \(why)"
            return StoreError(kind: .busy, resultCode: 5, message: message, path: file.path, clientReason: message)
        }
        return nil
    }

    /// The longest a commit is held back while the buffer is not yet full.
    static let maximumDelayNanos = 10_000_000
}

/// The ids a commit has written so far, each to its newest operation's outcome: a later
/// operation on the same id sees it.
///
/// Threading: the write path's thread.
struct GroupOverlay {
    /// Each id, numbered by its newest outcome's index.
    private var index = KeyIndex()
    /// A FLUSHALL came earlier in this commit: ids not written since are absent.
    private(set) var isCleared = false

    mutating func reset(forOperations operations: Int) {
        index.reset(forKeys: operations)
        isCleared = false
    }

    mutating func clearAll() {
        index.removeAll()
        isCleared = true
    }

    func outcome(of userId: UnsafeRawBufferPointer, frame: LogFrame, outcomes: [OperationOutcome]) -> Int? {
        index.find(userId) { frame.view(outcomes[$0].userId) }.number
    }

    /// Makes `outcome` (the next to be appended to `outcomes`) the newest for its id.
    mutating func record(_ userId: UnsafeRawBufferPointer, outcome: Int, frame: LogFrame,
                         outcomes: [OperationOutcome]) {
        let position = index.find(userId) { frame.view(outcomes[$0].userId) }
        index.set(position, to: outcome)
    }
}

/// Growable bytes, addressed by ranges so that growing moves nothing a caller holds.
///
/// Threading: one thread.
final class ByteScratch {
    private(set) var base: UnsafeMutableRawPointer
    private var capacity = 16 << 10
    private var count = 0

    init() { base = .allocate(byteCount: capacity, alignment: 8) }
    deinit { base.deallocate() }

    func removeAll() { count = 0 }

    func view(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count)
    }

    func append(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer,
                _ c: UnsafeRawBufferPointer) -> (Range<Int>, Range<Int>, Range<Int>) {
        let needed = count + a.count + b.count + c.count
        var retired: UnsafeMutableRawPointer?
        if needed > capacity {
            let larger = max(capacity * 2, needed)
            let grown = UnsafeMutableRawPointer.allocate(byteCount: larger, alignment: 8)
            grown.copyMemory(from: base, byteCount: count)
            // The values may be views of this scratch: freed only once they are copied.
            retired = base
            base = grown
            capacity = larger
        }
        defer { retired?.deallocate() }
        return (copy(a), copy(b), copy(c))
    }

    private func copy(_ value: UnsafeRawBufferPointer) -> Range<Int> {
        let start = count
        if value.count > 0 { (base + count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
        count += value.count
        return start..<count
    }
}
