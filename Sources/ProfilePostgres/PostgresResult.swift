import CPostgres

/// The rows of one statement, in PostgreSQL's text format, copied out of libpq's result (which
/// is freed at once): every cell's bytes in one array, so reading a cell allocates nothing.
///
/// Threading: a plain value; any thread.
public struct PostgresResult: Sendable {
    public let rowCount: Int
    public let columnCount: Int
    /// The rows the command inserted, updated, deleted, selected, ... (the count in its
    /// command tag, `UPDATE 3`); nil for commands without one (BEGIN, LISTEN, SET).
    public let affectedRows: Int?
    /// Every non-NULL cell's bytes, row after row.
    private let bytes: [UInt8]
    /// Where each cell starts in `bytes`, one entry per cell and one past the last; a NULL
    /// cell is marked by `-1 - start`.
    private let starts: [Int]

    /// Copies `result` (a PGresult, which the caller frees).
    init(_ result: OpaquePointer) {
        let rowCount = Int(PQntuples(result)), columnCount = Int(PQnfields(result))
        self.rowCount = rowCount
        self.columnCount = columnCount
        affectedRows = Int(String(cString: PQcmdTuples(result)))
        let cells = rowCount * columnCount
        var total = 0
        for cell in 0..<cells {
            total += Int(PQgetlength(result, Int32(cell / columnCount), Int32(cell % columnCount)))
        }
        var starts = [Int]()
        starts.reserveCapacity(cells + 1)
        // At least one byte: an array made with a capacity of 0 writes its count into the
        // runtime's one shared empty array, a race between threads.
        bytes = [UInt8](unsafeUninitializedCapacity: max(total, 1)) { buffer, count in
            for cell in 0..<cells {
                let row = Int32(cell / columnCount), column = Int32(cell % columnCount)
                if PQgetisnull(result, row, column) != 0 {
                    starts.append(-1 - count)
                    continue
                }
                starts.append(count)
                let length = Int(PQgetlength(result, row, column))
                if length > 0 {
                    UnsafeMutableRawPointer(buffer.baseAddress! + count)
                        .copyMemory(from: PQgetvalue(result, row, column), byteCount: length)
                }
                count += length
            }
            starts.append(count)
        }
        self.starts = starts
    }

    /// Calls `body` with the bytes of a cell, or nil when it is NULL; the buffer is valid only
    /// during the call.
    public func withValue<R>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        precondition(row >= 0 && row < rowCount && column >= 0 && column < columnCount,
                     "cell (\(row), \(column)) is outside a result of \(rowCount) × \(columnCount)")
        let cell = row * columnCount + column
        let start = starts[cell]
        guard start >= 0 else { return try body(nil) }
        var end = starts[cell + 1]
        if end < 0 { end = -1 - end }
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
    }

    /// A cell's bytes, or nil when it is NULL.
    public func value(_ row: Int, _ column: Int) -> [UInt8]? {
        withValue(row, column) { $0.map { Array($0) } }
    }

    /// A cell as text (invalid UTF-8 repaired), or nil when it is NULL.
    public func string(_ row: Int, _ column: Int) -> String? {
        withValue(row, column) { $0.map { String(decoding: $0, as: UTF8.self) } }
    }

    /// A cell as an integer, or nil when it is NULL or not a decimal integer that fits an Int.
    public func int(_ row: Int, _ column: Int) -> Int? {
        withValue(row, column) { bytes in
            guard let bytes else { return nil }
            return Int(String(decoding: bytes, as: UTF8.self))
        }
    }
}
