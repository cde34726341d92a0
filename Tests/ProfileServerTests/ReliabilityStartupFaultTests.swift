import ProfileTestSupport
import CSQLite
import Glibc
import ProfileClient
import Testing

/// Stores profiled must refuse to start on: one clear error line naming the path, a non-zero
/// exit, and the file left byte for byte as it was.
@Suite struct ReliabilityStartupFaultTests {
    @Test func aDirectoryItCannotReadStopsStartup() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory + "/locked"); removeDirectory(directory) }
        chmod(directory, 0o755)
        mkdir(directory + "/locked", 0o755)
        let path = directory + "/locked/profiles.sqlite3"
        try makeStore(at: path)
        let before = readBytes(path)
        chmod(directory + "/locked", 0)
        defer { chmod(directory + "/locked", 0o755) }
        // Root reads any directory, so as root the server runs without the capabilities that
        // let it ignore permissions.
        var command = [executable("profiled"), "--port", "0", "--db", path]
        if geteuid() == 0 {
            command = ["/usr/bin/setpriv", "--inh-caps=-dac_override,-dac_read_search",
                       "--bounding-set=-dac_override,-dac_read_search", "--"] + command
        }
        try expectRefusal(command, path: path)
        chmod(directory + "/locked", 0o755)
        #expect(readBytes(path) == before)
    }

    @Test func aPathThroughAFileStopsStartup() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        writeText(directory + "/plain", "a file where a directory should be\n")
        try expectRefusal([executable("profiled"), "--port", "0", "--db", directory + "/plain/profiles.sqlite3"],
                          path: directory + "/plain/profiles.sqlite3")
    }

    /// Files that are not a store of ours: each is refused and left as it was.
    @Test(arguments: ["random bytes", "sqlite header then garbage", "another application's database"])
    func aFileThatIsNotAStoreStopsStartupUntouched(kind: String) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/profiles.sqlite3"
        var random = SeededGenerator(seed: 42)
        switch kind {
        case "random bytes":
            writeBytes(path, (0..<8192).map { _ in UInt8.random(in: 0...255, using: &random) })
        case "sqlite header then garbage":
            writeBytes(path, Array("SQLite format 3\0".utf8) + (0..<8176).map { _ in UInt8.random(in: 0...255, using: &random) })
        default:
            try sqlite(path, "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        }
        let before = readBytes(path)
        try expectRefusal([executable("profiled"), "--port", "0", "--db", path], path: path)
        #expect(readBytes(path) == before)
    }

    /// A store of ours cut short or overwritten in the middle: refused, not served half-read.
    @Test(arguments: ["truncated to its first page", "truncated to half", "header overwritten", "a page overwritten"])
    func aDamagedStoreStopsStartupUntouched(damage: String) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/profiles.sqlite3"
        try makeStore(at: path, profiles: 2000)
        var bytes = readBytes(path)!
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        #expect(bytes.count > 8 * pageSize, "the store is too small to damage in the middle")
        switch damage {
        case "truncated to its first page":
            bytes.removeSubrange(pageSize...)
        case "truncated to half":
            bytes.removeSubrange((bytes.count / pageSize / 2 * pageSize)...)
        case "header overwritten":
            for i in 20..<100 { bytes[i] = 0xFF }
        default:
            for i in (3 * pageSize)..<(4 * pageSize) { bytes[i] = UInt8(truncatingIfNeeded: i &* 31) }
        }
        writeBytes(path, bytes)
        try expectRefusal([executable("profiled"), "--port", "0", "--db", path], path: path)
        #expect(readBytes(path) == bytes)
    }

    @Test func aStoreFromANewerVersionStopsStartupUntouched() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/profiles.sqlite3"
        try makeStore(at: path)
        try sqlite(path, "PRAGMA user_version = 99")
        let before = readBytes(path)
        let output = try expectRefusal([executable("profiled"), "--port", "0", "--db", path], path: path)
        #expect(output.contains("99"), "\(output)")
        #expect(readBytes(path) == before)
    }
}

/// Runs a server that must refuse to start; returns what it printed. One that starts serving
/// anyway is stopped and reported.
@discardableResult
func expectRefusal(_ command: [String], path: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
    let directory = try makeTemporaryDirectory()
    defer { removeDirectory(directory) }
    let outputPath = directory + "/output"
    let pid = try spawn(command[0], args: Array(command.dropFirst()), stderrPath: outputPath)
    var status: Int32 = 0
    let deadline = monotonicSeconds() + 10
    while waitpid(pid, &status, WNOHANG) == 0 {
        if monotonicSeconds() > deadline || readText(outputPath).contains("msg=listening") {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            Issue.record("it started on \(path): \(readText(outputPath))", sourceLocation: sourceLocation)
            return readText(outputPath)
        }
        usleep(2000)
    }
    let output = readText(outputPath)
    let code = exitCode(status)
    #expect(code > 0, "exit \(code): \(output)", sourceLocation: sourceLocation)
    #expect(output.split(separator: "\n").count == 1, "not one line: \(output)", sourceLocation: sourceLocation)
    #expect(output.contains(path), "the line does not name \(path): \(output)", sourceLocation: sourceLocation)
    return output
}

/// A store made by profiled itself, with `profiles` profiles, cleanly stopped.
func makeStore(at path: String, profiles: Int = 10) throws {
    let server = try TestServer(["--db", path])
    let c = try server.connect()
    for first in stride(from: 0, to: profiles, by: 500) {
        _ = try c.mset((first..<min(profiles, first + 500)).map {
            Profile(userId: "user-\($0)", name: "Name \($0)", portraitUri: "https://cdn.example/p/\($0).png")
        })
    }
    #expect(exitCode(server.stop()) == 0)
}

/// Runs SQL on a file with a connection of our own.
func sqlite(_ path: String, _ sql: String) throws {
    var db: OpaquePointer? = nil
    defer { sqlite3_close(db) }
    guard sqlite3_open(path, &db) == SQLITE_OK, sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
        throw TestFailure("\(sql) on \(path): \(String(cString: sqlite3_errmsg(db)))")
    }
}


func writeBytes(_ path: String, _ bytes: [UInt8]) {
    let file = fopen(path, "w")!
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) }
    fclose(file)
}
