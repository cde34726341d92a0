import Glibc
import ProfileClient
import ProfileProtocol
import ProfileStore
import ProfileStoreSQLite

/// What an import reads and where it writes.
///
/// Threading: a plain value; any thread.
public struct ImportOptions: Sendable {
    /// Files to read in order; `-` is standard input.
    public var files: [String]
    /// The format of every file; nil lets each file's extension decide.
    public var format: FileFormat?
    /// A store file for an offline import; nil imports through the server.
    public var databasePath: String?
    public var server: ServerOptions
    /// Stop at the first bad row, writing nothing of its batch.
    public var strict: Bool
    /// Rows per batch: per MSET online (at most 1,000, fewer when the line
    /// limit comes first), per transaction offline (default 1,000,000). Nil picks the default.
    public var batchSize: Int?
    /// The server's longest request line, LF included; nil is the protocol's default.
    /// MSET lines stay within it and a row that cannot fit in one is a bad row. Online only.
    public var maxLine: Int?

    public init(files: [String], format: FileFormat? = nil, databasePath: String? = nil,
                server: ServerOptions = ServerOptions(), strict: Bool = false, batchSize: Int? = nil,
                maxLine: Int? = nil) {
        self.files = files
        self.format = format
        self.databasePath = databasePath
        self.server = server
        self.strict = strict
        self.batchSize = batchSize
        self.maxLine = maxLine
    }

    static let defaultServerBatch = 1000
    static let defaultStoreBatch = 1_000_000
}

/// How an import ended.
///
/// Threading: a plain value; any thread.
public struct ImportSummary: Sendable, Equatable {
    /// Data rows read, good and bad.
    public var read: Int
    /// Rows the server or the store acknowledged.
    public var written: Int
    /// Bad rows, skipped (or the one that stopped a strict import).
    public var rejected: Int
    public var seconds: Double

    /// `read N, written N, rejected N, 1.23 s, 456789 rows/s`
    public var line: String {
        let rate = seconds > 0 ? Int(Double(written) / seconds) : 0
        let rounded = (seconds * 100).rounded() / 100
        return "read \(read), written \(written), rejected \(rejected), \(rounded) s, \(rate) rows/s"
    }

    /// 0 when every row went in, 1 when some were rejected.
    public var exitCode: Int32 { rejected == 0 ? 0 : 1 }
}

/// Runs `profilectl import`.
///
/// Threading: runs on the calling thread.
public enum Importer {
    /// Imports every file, reporting bad rows as `FILE:LINE: reason` and
    /// progress on standard error.
    ///
    /// - Throws: `AdminError.file` or `.server` when a file, the store or the
    ///   server fails; rows acknowledged before then stay written.
    public static func run(_ options: ImportOptions) throws(AdminError) -> ImportSummary {
        var inputs: [(name: String, input: FileInput, format: FileFormat)] = []
        do {
            for path in options.files {
                // Opened first: a file that is not there is that, whatever its name says.
                let input = try FileInput(path: path)
                guard let format = options.format ?? FileFormat(fileName: path) else {
                    throw AdminError.usage("cannot tell the format of \(path); name it with --format csv|jsonl")
                }
                inputs.append((path == "-" ? "stdin" : path, input, format))
            }
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError.file("\(error)")
        }
        let sizes = inputs.map(\.input.size)
        let totalBytes: Int? = sizes.contains { $0 == nil } ? nil : sizes.reduce(0) { $0 + $1! }
        let progress = ImportProgress(totalBytes: totalBytes, isTerminal: isatty(2) == 1)

        let run = ImportRun(options: options, progress: progress, inputs: inputs)
        do {
            try run.run()
        } catch {
            progress.clearBar()
            throw importFailure(error, summary: run.summary, maxLine: options.maxLine ?? Limits.defaultMaxLine)
        }
        progress.clearBar()
        if run.summary.read == 0 {
            writeStandardError("profilectl: no rows to import\n")
        }
        return run.summary
    }

    private static func importFailure(_ error: any Error, summary: ImportSummary, maxLine: Int) -> AdminError {
        // Once rows were read, say how far the import got.
        let after = summary.read > 0 ? " (\(summary.line))" : ""
        switch error {
        case let error as AdminError:
            if case .file(let message) = error { return .file(message + after) }
            return error
        case ClientError.server(let code, let message) where code == "TOOLONG":
            return .server(code: code, message: message + after + "; the server's line limit is below the \(maxLine) "
                           + "bytes import fills: give import the server's --max-line with --max-line BYTES (or a smaller --batch)")
        case ClientError.server(let code, let message):
            return .server(code: code, message: message + after)
        case let error as ClientError:
            return .file("\(error)" + after)
        default:
            return .file("\(error)" + after)
        }
    }
}

/// One import in progress: the files, where the rows go, and the counts.
///
/// Threading: the importing thread.
private final class ImportRun {
    /// A strict import met a bad row.
    private struct StrictStop: Error {}

    let options: ImportOptions
    let progress: ImportProgress
    private let inputs: [(name: String, input: FileInput, format: FileFormat)]
    private var fileIndex = 0
    private var parser: (any RowParser)?
    private var sink: (any ImportSink)?
    private var read = 0
    private var rejected = 0
    /// Bytes of the files already finished, for progress.
    private var bytesBefore = 0
    private var sinceUpdate = 0

    init(options: ImportOptions, progress: ImportProgress,
         inputs: [(name: String, input: FileInput, format: FileFormat)]) {
        self.options = options
        self.progress = progress
        self.inputs = inputs
    }

    var summary: ImportSummary {
        ImportSummary(read: read, written: sink?.written ?? 0, rejected: rejected, seconds: progress.elapsed)
    }

    func run() throws {
        do {
            if let path = options.databasePath {
                let store = try StoreSink(path: path)
                sink = store
                try runOffline(store)
            } else {
                let server = ServerSink(connection: try options.server.connect(),
                                        maxLine: options.maxLine ?? Limits.defaultMaxLine)
                sink = server
                try runOnline(server)
            }
        } catch is StrictStop {
            return
        }
    }

    /// Batches of rows as pipelined MSETs; a strict stop drops the batch being filled.
    private func runOnline(_ sink: ServerSink) throws {
        let batchSize = options.batchSize ?? ImportOptions.defaultServerBatch
        let batch = RowBatch(expectedRows: batchSize)
        defer { try? sink.finish() }
        while let row = try nextRow() {
            batch.append(row)
            if batch.count == batchSize {
                try sink.write(batch)
                batch.removeAll()
            }
        }
        if !batch.isEmpty { try sink.write(batch) }
        try sink.finish()
    }

    /// Rows into large transactions, each gathered in one upsert batch that the store writes
    /// sorted by id: with ids in random order most pages of the table change in every
    /// transaction, so fewer, larger commits write far less, and sorted writes touch each page
    /// once. The batch keeps its rows in sorted runs in a temporary file, so memory stays flat.
    /// File order still decides which rows are newer. A strict stop rolls back the transaction
    /// it happens in. A transaction begins only with a row to write (but the first, which makes
    /// the store of an empty import), since reopening a store that the first one built checks
    /// every page of it.
    private func runOffline(_ sink: StoreSink) throws {
        let transactionRows = options.batchSize ?? ImportOptions.defaultStoreBatch
        let batch = sink.writer.makeUpsertBatch()
        defer { batch.removeAll() }
        // The parser's views stay valid until the next row is asked for.
        var row = try nextRow()
        repeat {
            let rows = try sink.writer.transaction { () throws -> Int in
                var rows = 0
                while let current = row, rows < transactionRows {
                    try batch.append(userId: current.userId, name: current.name, portraitUri: current.portraitUri)
                    rows += 1
                    row = try nextRow()
                }
                try sink.writer.upsert(batch)
                return rows
            }
            sink.committed(rows)
        } while row != nil
        try sink.finish()
    }

    /// The next good row of any file, reporting bad ones; nil after the last file.
    private func nextRow() throws -> RowValues? {
        while fileIndex < inputs.count {
            let (name, input, format) = inputs[fileIndex]
            let parser = self.parser ?? format.parser(input)
            self.parser = parser
            let event: RowEvent
            do {
                event = try parser.next()
            } catch let error as FormatError {
                throw AdminError.file("\(name):\(error.line): \(error.reason)")
            }
            switch event {
            case .row(let line):
                read += 1
                sinceUpdate += 1
                if sinceUpdate == 4096 {
                    sinceUpdate = 0
                    progress.update(rows: read, bytes: bytesBefore + parser.bytesConsumed)
                }
                // The default line holds any row the parsers let through; a lower --max-line may not.
                if let maxLine = options.maxLine, options.databasePath == nil {
                    let bytes = ServerSink.lineBytes(parser.values)
                    if bytes > maxLine {
                        try reject(name, line, "the row needs \(bytes) bytes as an MSET line, over --max-line \(maxLine)")
                        continue
                    }
                }
                return parser.values
            case .bad(let line, let reason):
                read += 1
                try reject(name, line, reason)
            case .end:
                bytesBefore += parser.bytesConsumed
                self.parser = nil
                fileIndex += 1
            }
        }
        return nil
    }

    /// Reports and counts a bad row; a strict import stops at it.
    private func reject(_ name: String, _ line: Int, _ reason: String) throws {
        rejected += 1
        progress.message("\(name):\(line): \(reason)")
        if options.strict { throw StrictStop() }
    }
}
