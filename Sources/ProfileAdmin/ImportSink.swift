import Glibc
import ProfileClient
import ProfileProtocol
import ProfileStore
import ProfileStoreSQLite

/// Where an import writes.
///
/// Threading: one thread at a time (the importing thread).
protocol ImportSink: AnyObject {
    /// Rows acknowledged so far.
    var written: Int { get }
}

/// Sends batches to a running profiled as pipelined MSET requests, so the
/// server's cache stays right: each MSET holds as many triples as fit in one
/// request line of `maxLine` bytes (and at most 1,000), and up to `depth` of them
/// wait for their replies while the next ones are sent. Every row must fit in a
/// line of its own (`lineBytes`).
///
/// Threading: one thread at a time.
final class ServerSink: ImportSink {
    private let connection: ProfileConnection
    private let depth: Int
    private let maxLine: Int
    private var inFlight: [Int] = []
    private var firstInFlight = 0
    private var line: [UInt8] = []
    /// Triples in `line` so far.
    private var triples = 0
    private(set) var written = 0

    init(connection: ProfileConnection, depth: Int = 8, maxLine: Int = Limits.defaultMaxLine) {
        self.connection = connection
        self.depth = depth
        self.maxLine = maxLine
        line.reserveCapacity(maxLine)
    }

    /// Sends a batch; it may be reused once this returns.
    func write(_ batch: RowBatch) throws {
        startLine()
        try batch.forEach(add)
        if triples > 0 { try send() }
    }

    private func startLine() {
        line.removeAll(keepingCapacity: true)
        line.append(contentsOf: "MSET".utf8)
        triples = 0
    }

    /// Bytes a row's triple adds to an MSET line: three blanks and the encoded values.
    static func tripleBytes(_ row: RowValues) -> Int {
        3 + ValueEncoder.encodedCount(row.userId) + ValueEncoder.encodedCount(row.name)
            + ValueEncoder.encodedCount(row.portraitUri)
    }

    /// The bytes of an MSET line of this row alone, LF included.
    static func lineBytes(_ row: RowValues) -> Int {
        "MSET".utf8.count + tripleBytes(row) + 1
    }

    private func add(_ row: RowValues) throws(ClientError) {
        let size = Self.tripleBytes(row)
        // The LF counts against the line limit too.
        if triples == Limits.maxTriples || line.count + size + 1 > maxLine {
            try send()
            startLine()
        }
        append(row.userId)
        append(row.name)
        append(row.portraitUri)
        triples += 1
    }

    private func append(_ value: UnsafeRawBufferPointer) {
        line.append(0x20)
        let start = line.count
        let count = ValueEncoder.encodedCount(value)
        line.append(contentsOf: repeatElement(0, count: count))
        _ = line.withUnsafeMutableBytes { ValueEncoder.write(value, to: $0.baseAddress! + start) }
    }

    private func send() throws(ClientError) {
        line.append(0x0A)
        connection.sendRaw(line)
        inFlight.append(triples)
        do {
            try connection.flush()
        } catch {
            // A server that answers an error and closes (TOOLONG) fails the write; the replies
            // it sent first count what was stored, and its error says why.
            while firstInFlight < inFlight.count {
                do {
                    try readOneReply()
                } catch .server(let code, let message) {
                    throw ClientError.server(code: code, message: message)
                } catch {
                    break
                }
            }
            throw error
        }
        while inFlight.count - firstInFlight > depth {
            try readOneReply()
        }
    }

    private func readOneReply() throws(ClientError) {
        let expected = inFlight[firstInFlight]
        firstInFlight += 1
        if firstInFlight == inFlight.count {
            inFlight.removeAll(keepingCapacity: true)
            firstInFlight = 0
        }
        let stored = try connection.readStoredCount()
        guard stored == expected else {
            throw ClientError.unexpectedReply("STORED \(stored) for an MSET of \(expected) profiles")
        }
        written += stored
    }

    /// Waits for the reply of every MSET sent.
    func finish() throws {
        while firstInFlight < inFlight.count {
            try readOneReply()
        }
    }
}

/// A store file written directly, through the same store code and write
/// sequence the server uses; the import drives its writer's transactions.
///
/// Threading: one thread at a time.
final class StoreSink: ImportSink {
    let writer: OfflineStoreWriter
    private(set) var written = 0

    /// Opens the store at `path` for the import, naming a running server as the reason it is
    /// locked. The writer's page cache is 32 MiB: an offline import writes its rows sorted by
    /// id, which changes each page once, so a larger cache bought no speed (a million random
    /// ids took the same time with 256 MiB) and only raised peak memory (220 MB against 117 MB).
    init(path: String) throws(AdminError) {
        do {
            writer = try OfflineStoreWriter(path: path, cacheMebibytes: 32)
        } catch {
            throw storeOpenFailure(error, path: path, instead: "import online")
        }
    }

    /// Counts the rows of a committed transaction.
    func committed(_ rows: Int) {
        written += rows
    }

    /// Copies the log into the database file and removes the lock file, so the import leaves
    /// one file.
    func finish() throws {
        try writer.checkpoint()
        writer.removeLockFile()
    }
}

/// Opens a store for profilectl, naming a running server as the reason it is locked.
func openStore(_ path: String, instead: String) throws(AdminError) -> SQLiteProfileStore {
    do {
        return try SQLiteProfileStore(path: path, writerCacheMebibytes: 32)
    } catch {
        throw storeOpenFailure(error, path: path, instead: instead)
    }
}

/// Why profilectl could not open the store at `path`; `instead` is what to do while a server
/// holds it.
private func storeOpenFailure(_ error: StoreError, path: String, instead: String) -> AdminError {
    if error.kind == .locked {
        return AdminError.file("\(path) is in use by a running profiled; stop it or \(instead)")
    }
    return AdminError.file(error.description)
}
