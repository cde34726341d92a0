import ProfileStore

/// Upserts copied aside until the writer hands them to SQLite together.
///
/// One statement of 32 rows costs about two thirds of 32 one-row statements,
/// because SQLite sets up and tears down a statement once per step. Rows keep
/// their order, so a repeated id still ends with its last values.
///
/// Threading: the writer's thread.
final class PendingUpserts {
    /// The rows of the writer's multi-row statement.
    static let batchRows = 32

    private struct Row {
        var userId: Range<Int>
        var name: Range<Int>
        var portraitUri: Range<Int>
        var sequence: Int64
    }

    /// The bytes of every pending row, back to back. Raw memory rather than an
    /// array so its addresses stay put while SQLite reads them.
    private var storage: UnsafeMutableRawBufferPointer
    private var used = 0
    private var rows: [Row] = []

    init() {
        storage = .allocate(byteCount: 16 * 1024, alignment: 1)
        rows.reserveCapacity(Self.batchRows)
    }

    deinit {
        storage.deallocate()
    }

    var count: Int { rows.count }

    func append(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer,
                sequence: Int64) {
        let needed = used + userId.count + name.count + portraitUri.count
        if needed > storage.count {
            let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(needed, storage.count * 2), alignment: 1)
            larger.baseAddress!.copyMemory(from: storage.baseAddress!, byteCount: used)
            storage.deallocate()
            storage = larger
        }
        rows.append(Row(userId: copy(userId), name: copy(name), portraitUri: copy(portraitUri), sequence: sequence))
    }

    private func copy(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let start = used
        if let source = bytes.baseAddress {
            (storage.baseAddress! + start).copyMemory(from: source, byteCount: bytes.count)
        }
        used += bytes.count
        return start..<used
    }

    /// The id of the newest pending row, valid until the next change.
    var lastUserId: UnsafeRawBufferPointer? {
        rows.last.map { view($0.userId) }
    }

    /// Drops the newest pending row, for a newer row of the same id.
    func removeLast() {
        guard let last = rows.popLast() else { return }
        used = last.userId.lowerBound
    }

    func removeAll() {
        used = 0
        rows.removeAll(keepingCapacity: true)
    }

    /// Writes the pending rows and forgets them: `batch` (a statement of `batchRows` rows)
    /// for each full batch, `single` for each row left. `write` binds the rows of `range` to
    /// the statement it is given (with `bind`) and steps it; the statement is reset after.
    func write(single: Statement, batch: Statement,
               _ write: (Statement, Range<Int>) throws(StoreError) -> Void) throws(StoreError) {
        defer { removeAll() }
        var first = 0
        while first < count {
            let rows = count - first >= Self.batchRows ? Self.batchRows : 1
            let statement = rows == 1 ? single : batch
            defer { statement.reset() }
            try write(statement, first..<first + rows)
            first += rows
        }
    }

    /// Binds `rows[range]` to `statement` as (user_id, name, portrait_uri, seq)
    /// groups from parameter 1 on. The views stay valid until the next append.
    func bind(_ range: Range<Int>, to statement: Statement) throws(StoreError) {
        var parameter: Int32 = 1
        for row in rows[range] {
            try statement.bind(parameter, view(row.userId))
            try statement.bind(parameter + 1, view(row.name))
            try statement.bind(parameter + 2, view(row.portraitUri))
            try statement.bind(parameter + 3, row.sequence)
            parameter += 4
        }
    }

    /// Binds `rows[range]` to `statement` as (seq, user_id) pairs from parameter 1 on, for
    /// `recent` (`RecencyTable.appendSQL`). The views stay valid until the next append.
    func bindRecency(_ range: Range<Int>, to statement: Statement) throws(StoreError) {
        var parameter: Int32 = 1
        for row in rows[range] {
            try statement.bind(parameter, row.sequence)
            try statement.bind(parameter + 1, view(row.userId))
            parameter += 2
        }
    }

    private func view(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: storage[range])
    }
}
