import Glibc
import ProfileClient
import ProfileStore

/// What an export reads and where it writes.
///
/// Threading: a plain value; any thread.
public struct ExportOptions: Sendable {
    public var format: FileFormat
    /// A file to create; nil writes to standard output.
    public var outputPath: String?
    /// A store file to read offline; nil reads from the server.
    public var databasePath: String?
    public var server: ServerOptions

    public init(format: FileFormat = .jsonl, outputPath: String? = nil, databasePath: String? = nil,
                server: ServerOptions = ServerOptions()) {
        self.format = format
        self.outputPath = outputPath
        self.databasePath = databasePath
        self.server = server
    }
}

/// Runs `profilectl export`: every profile in userId byte order, page by page,
/// so memory stays flat however many there are.
///
/// Threading: runs on the calling thread.
public enum Exporter {
    static let serverPage = 1000
    static let storePage = 10_000

    /// Writes every profile; returns how many.
    public static func run(_ options: ExportOptions) throws(AdminError) -> Int {
        let out: OutputFile
        if let path = options.outputPath {
            out = try OutputFile(path: path)
        } else {
            out = OutputFile()
        }
        if options.format == .csv { out.append(RecordWriter.csvHeader) }
        let format = options.format
        let write = { (id: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, uri: UnsafeRawBufferPointer,
                       out: OutputFile) in
            switch format {
            case .csv: RecordWriter.csv(id, name, uri, to: out)
            case .jsonl: RecordWriter.jsonLine(id, name, uri, to: out)
            }
        }
        let count: Int
        if let path = options.databasePath {
            count = try exportStore(path, out: out, write: write)
        } else {
            count = try exportServer(options.server, out: out, write: write)
        }
        try out.flush()
        return count
    }

    private static func exportServer(
        _ server: ServerOptions, out: OutputFile,
        write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeRawBufferPointer, OutputFile) -> Void
    ) throws(AdminError) -> Int {
        let connection = try server.connect()
        var after: [UInt8] = []
        var count = 0
        while true {
            let page: [Profile]
            do {
                page = try connection.scan(after: after, limit: serverPage)
            } catch .server(let code, let message) {
                throw AdminError.server(code: code, message: message)
            } catch {
                throw AdminError.file("\(error)")
            }
            for profile in page {
                profile.userId.withUnsafeBytes { id in
                    profile.name.withUnsafeBytes { name in
                        profile.portraitUri.withUnsafeBytes { uri in write(id, name, uri, out) }
                    }
                }
                try out.flushIfFull()
            }
            count += page.count
            guard page.count == serverPage, let last = page.last else { return count }
            after = last.userId
        }
    }

    private static func exportStore(
        _ path: String, out: OutputFile,
        write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeRawBufferPointer, OutputFile) -> Void
    ) throws(AdminError) -> Int {
        guard access(path, F_OK) == 0 else {
            throw AdminError.file("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        let store = try openStore(path, instead: "export online")
        var after: [UInt8] = []
        var count = 0
        do {
            let reader = try store.makeReader()
            while true {
                var rows = 0
                var last: [UInt8] = []
                try after.withUnsafeBytes { start in
                    try reader.scan(after: start, limit: storePage) { row in
                        write(row.userId, row.name, row.portraitUri, out)
                        rows += 1
                        if rows == storePage { last = Array(row.userId) }
                    }
                }
                try out.flushIfFull()
                count += rows
                guard rows == storePage else { return count }
                after = last
            }
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError.file("\(error)")
        }
    }
}
