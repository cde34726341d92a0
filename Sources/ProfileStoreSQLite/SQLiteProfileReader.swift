import CSQLite
import ProfileStore

/// Reads profiles over a connection of its own, with its statements prepared once: the write
/// buffer first, then the table. Lookups allocate nothing: the id is bound in place and the row
/// is handed out as views into the buffer's or SQLite's memory.
///
/// A read transaction (`beginRead`) is renewed when the buffer has dropped writes since its
/// snapshot began (`WriteBuffer.dropEpoch`): those writes are in the table now, and an older
/// snapshot would miss them. RECENT and SCAN hold the buffer's lock while they read, with a
/// snapshot of their own, so the two halves they put together belong to one moment.
///
/// Threading: one thread at a time.
final class SQLiteProfileReader: ProfileReader {
    private let buffer: WriteBuffer
    private let connection: Connection
    private let lookupStatement: Statement
    private let recentStatement: Statement
    private let scanStatement: Statement
    private let beginStatement: Statement
    private let endStatement: Statement
    private var inTransaction = false
    /// The buffer's drop epoch when the open transaction's snapshot began; nil until its first read.
    private var snapshotEpoch: Int?

    init(file: StoreFile, buffer: WriteBuffer) throws(StoreError) {
        self.buffer = buffer
        connection = try Connection(file: file)
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
        // No LIMIT: rows the buffer has newer writes for are skipped, as many as there are. A
        // row of `recent` counts while its profile still has that sequence.
        recentStatement = try Statement(connection, """
            SELECT r.user_id, p.name, p.portrait_uri FROM recent AS r
            JOIN profiles AS p ON p.user_id = r.user_id AND p.seq = r.seq
            ORDER BY r.seq DESC
            """)
        scanStatement = try Statement(connection,
            "SELECT user_id, name, portrait_uri FROM profiles WHERE user_id > ?1 ORDER BY user_id")
        beginStatement = try Statement(connection, "BEGIN")
        endStatement = try Statement(connection, "COMMIT")
    }

    static let mapBytes = 1 << 30
    static let cacheKibibytes = 16 * 1024

    func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R {
        let epoch: Int
        switch try buffer.lookUp(userId, { entry in try body(entry.row) }) {
        case .found(let result):
            return result
        case .notHere(let tableCleared, let dropEpoch):
            if tableCleared { return try body(nil) }
            epoch = dropEpoch
        }
        try renewSnapshot(ifOlderThan: epoch)
        defer { lookupStatement.reset() }
        return try body(try selectRow(userId))
    }

    /// The table's row for `userId`, for the write path, which has looked in the buffer
    /// itself and read the drop epoch (`epoch`) under the same hold of its lock. The lookups of
    /// one commit share a read transaction, which the write path ends with `endRead` when the
    /// commit is done: a transaction per lookup would take two file-lock calls and a check of the
    /// write-ahead log each, about a third of what a lookup costs.
    func lookupRow<R>(_ userId: UnsafeRawBufferPointer, epoch: Int, _ body: (ProfileRow?) -> R) throws(StoreError) -> R {
        if !inTransaction { try beginTransaction() }
        try renewSnapshot(ifOlderThan: epoch)
        defer { lookupStatement.reset() }
        return body(try selectRow(userId))
    }

    /// The table's row for `userId`: views into SQLite's memory, valid until the caller resets
    /// `lookupStatement`.
    private func selectRow(_ userId: UnsafeRawBufferPointer) throws(StoreError) -> ProfileRow? {
        try lookupStatement.bind(1, userId)
        guard try lookupStatement.step() else { return nil }
        return ProfileRow(userId: userId, name: lookupStatement.text(0), portraitUri: lookupStatement.text(1))
    }

    /// Makes the open transaction's snapshot at least as new as the drop epoch `epoch`.
    private func renewSnapshot(ifOlderThan epoch: Int) throws(StoreError) {
        guard inTransaction else { return }
        if let snapshotEpoch, snapshotEpoch != epoch {
            endRead()
            try beginTransaction()
        }
        // The snapshot begins at the first read, which follows the epoch just read.
        if snapshotEpoch == nil { snapshotEpoch = epoch }
    }

    func beginRead() throws {
        try beginTransaction()
    }

    private func beginTransaction() throws(StoreError) {
        defer { beginStatement.reset() }
        _ = try beginStatement.step()
        inTransaction = true
        snapshotEpoch = nil
    }

    func endRead() {
        guard inTransaction else { return }
        // Ending a read-only transaction cannot lose anything; a failure leaves it to the
        // next BEGIN to report.
        _ = try? endStatement.step()
        endStatement.reset()
        inTransaction = false
        snapshotEpoch = nil
    }

    /// Runs `body` with the buffer's lock held and a snapshot of the table begun under it, so
    /// that no merge moves writes between the two meanwhile. Ends any open transaction: later
    /// lookups read with snapshots of their own until the next `beginRead`.
    private func withConsistentView(_ body: (WriteBufferContents) throws -> Void) throws {
        endRead()
        try buffer.withContents { contents in
            defer { endRead() }
            try beginTransaction()
            try body(contents)
        }
    }

    func recent(limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        guard limit > 0 else { return }
        try withConsistentView { buffer in
            var given = 0
            // Newest first: the buffer's memtables backwards, each entry that is its id's newest.
            for memtable in buffer.memtables.reversed() {
                for offset in memtable.offsets.reversed() {
                    let entry = memtable.entry(at: offset)
                    guard buffer.isNewest(entry, at: offset, in: memtable), let row = entry.row else { continue }
                    try each(row)
                    given += 1
                    if given == limit { return }
                }
            }
            guard !buffer.tableCleared else { return }
            // Then the table, skipping ids the buffer has a newer write (or removal) for.
            let statement = recentStatement
            defer { statement.reset() }
            while try statement.step() {
                let row = statement.profileRow
                guard buffer.newest(row.userId) == nil else { continue }
                try each(row)
                given += 1
                if given == limit { return }
            }
        }
    }

    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        guard limit > 0 else { return }
        try withConsistentView { buffer in
            let candidates = bufferedProfiles(buffer, after: after, limit: limit)
            var next = 0
            var given = 0
            if !buffer.tableCleared {
                let statement = scanStatement
                defer { statement.reset() }
                try statement.bind(1, after)
                while given < limit, try statement.step() {
                    let row = statement.profileRow
                    guard buffer.newest(row.userId) == nil else { continue }
                    // Buffered profiles that sort before this row go first.
                    while given < limit, next < candidates.count, compareIds(candidates[next].userId, row.userId) < 0 {
                        try each(candidates[next].row!)
                        next += 1
                        given += 1
                    }
                    guard given < limit else { return }
                    try each(row)
                    given += 1
                }
            }
            while given < limit, next < candidates.count {
                try each(candidates[next].row!)
                next += 1
                given += 1
            }
        }
    }

    /// Up to `limit` of the buffer's profiles (newest entries that are not removals) whose ids
    /// sort after `after`, in id order. Sorted memtables are walked together, smallest id
    /// first, until `limit` are found; an unsorted one (the active memtable, or one frozen so
    /// recently that the merger has not sorted it yet) gives its smallest in one pass.
    private func bufferedProfiles(_ buffer: WriteBufferContents, after: UnsafeRawBufferPointer, limit: Int) -> [MemtableEntry] {
        var found: [MemtableEntry] = []
        var walks: [(memtable: Memtable, sorted: [UInt32], position: Int)] = []
        for memtable in buffer.memtables {
            guard let sorted = memtable.sortedLatest else {
                found += smallest(limit, of: memtable, after: after, in: buffer)
                continue
            }
            // The first id past `after`, by binary search.
            var low = 0, high = sorted.count
            while low < high {
                let middle = (low + high) / 2
                if compareIds(memtable.entry(at: sorted[middle]).userId, after) <= 0 { low = middle + 1 } else { high = middle }
            }
            if low < sorted.count { walks.append((memtable, sorted, low)) }
        }
        // A min-heap of the walks by their current id.
        func current(_ walk: Int) -> MemtableEntry { walks[walk].memtable.entry(at: walks[walk].sorted[walks[walk].position]) }
        func less(_ a: Int, _ b: Int) -> Bool { compareIds(current(a).userId, current(b).userId) < 0 }
        var heap = Array(walks.indices)
        MergeHeap.build(&heap, by: less)
        var taken = 0
        while taken < limit, let top = heap.first {
            let offset = walks[top].sorted[walks[top].position]
            let entry = walks[top].memtable.entry(at: offset)
            if !entry.isRemoval && buffer.isNewest(entry, at: offset, in: walks[top].memtable) {
                found.append(entry)
                taken += 1
            }
            walks[top].position += 1
            if walks[top].position == walks[top].sorted.count {
                heap[0] = heap[heap.count - 1]
                heap.removeLast()
            }
            MergeHeap.siftDown(&heap, by: less)
        }
        found.sort { compareIds($0.userId, $1.userId) < 0 }
        if found.count > limit { found.removeLast(found.count - limit) }
        return found
    }

    /// The `limit` smallest ids past `after` among an unsorted memtable's newest profiles, in
    /// no order: one pass with a bounded max-heap, so most entries cost two comparisons.
    private func smallest(_ limit: Int, of memtable: Memtable, after: UnsafeRawBufferPointer,
                          in buffer: WriteBufferContents) -> [MemtableEntry] {
        var heap: [MemtableEntry] = []
        heap.reserveCapacity(limit)
        func larger(_ a: Int, _ b: Int) -> Bool { compareIds(heap[a].userId, heap[b].userId) > 0 }
        for offset in memtable.offsets {
            let entry = memtable.entry(at: offset)
            guard !entry.isRemoval, compareIds(entry.userId, after) > 0 else { continue }
            if heap.count == limit && compareIds(entry.userId, heap[0].userId) >= 0 { continue }
            guard buffer.isNewest(entry, at: offset, in: memtable) else { continue }
            if heap.count < limit {
                heap.append(entry)
                var child = heap.count - 1
                while child > 0, larger(child, (child - 1) / 2) {
                    heap.swapAt(child, (child - 1) / 2)
                    child = (child - 1) / 2
                }
            } else {
                heap[0] = entry
                var parent = 0
                while true {
                    let left = 2 * parent + 1
                    guard left < heap.count else { break }
                    var largest = left
                    if left + 1 < heap.count && larger(left + 1, left) { largest = left + 1 }
                    guard larger(largest, parent) else { break }
                    heap.swapAt(parent, largest)
                    parent = largest
                }
            }
        }
        return heap
    }
}
