import Glibc
import ProfileClient
import ProfileStore
import ProfileStoreSQLite

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
        if let path = options.outputPath, let store = options.databasePath, isStoreFile(path, of: store) {
            throw AdminError.usage("-o \(path) names the store --db reads, or a file beside it that the store uses")
        }
        let out: OutputFile
        if let path = options.outputPath {
            out = try OutputFile(replacing: path)
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
        try out.commit()
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
                guard rows == storePage else {
                    store.removeLockFile()
                    return count
                }
                after = last
            }
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError.file("\(error)")
        }
    }

    /// Whether `path` is, after links and other names are followed, the store file at
    /// `store` or one of the files beside it: its WAL, its write log, their WALs or its lock.
    private static func isStoreFile(_ path: String, of store: String) -> Bool {
        var output = stat()
        let outputExists = stat(path, &output) == 0
        for storeFile in SQLiteProfileStore.files(at: store) {
            var file = stat()
            if outputExists && stat(storeFile, &file) == 0 {
                if file.st_dev == output.st_dev && file.st_ino == output.st_ino { return true }
            } else if let a = resolvedPath(path), a == resolvedPath(storeFile) {
                // One of them does not exist yet (a WAL comes and goes): compare where they would be.
                return true
            }
        }
        return false
    }

    /// The absolute path with every link followed, of the file or, when it does not exist,
    /// of its directory with the file's name appended.
    private static func resolvedPath(_ path: String) -> String? {
        if let resolved = realpath(path, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        guard let resolved = realpath(directory, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved) + "/" + name
    }
}
