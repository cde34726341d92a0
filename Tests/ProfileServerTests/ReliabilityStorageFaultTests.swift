import ProfileTestSupport
import CSQLite
import Glibc
import ProfileClient
@testable import ProfileServer
import ProfileStore
@_spi(Testing) import ProfileStoreSQLite
import Synchronization
import Testing

/// The store failing under the server: every failed write gets ERROR STORE and changes nothing,
/// reads go on from the cache and the store, nothing is acknowledged that was not committed, and
/// writes work again once the fault clears, without a restart.
@Suite struct ReliabilityStorageFaultTests {
    /// SQLITE_FULL and SQLITE_IOERR, injected into the store's writes (the write log's appends
    /// and the merges) through its test seam, under the server's own worker and group-commit
    /// writer.
    @Test(arguments: [SQLITE_FULL, SQLITE_IOERR])
    func anInjectedFaultFailsEveryWriteAndChangesNothing(code: Int32) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/profiles.sqlite3"
        // A first run leaves "cold" only in the store; the second run's cache starts empty.
        do {
            let first = try InProcessServer(path: path)
            try first.connect().set(Profile(userId: "cold", name: "from disk", portraitUri: "c"))
            first.stop()
        }
        let server = try InProcessServer(path: path)
        let c = try server.connect()
        try c.set(Profile(userId: "warm", name: "before", portraitUri: "w"))
        try c.set(Profile(userId: "gone", name: "to delete", portraitUri: "g"))
        #expect(try c.get(Array("warm".utf8))?.name == Array("before".utf8))
        let recentBefore = try c.recent(10)

        server.store.setFault(code)
        let writes: [(String, [String])] = [
            ("SET", ["warm", "after", "w2"]),
            ("MSET", ["new1", "n", "u", "new2", "n", "u", "warm", "mset", "w3"]),
            ("UPDATE", ["warm", "name", "updated"]),
            ("UPDATE", ["cold", "name", "updated", "portraitUri", "x"]),
            ("DEL", ["gone"]),
            ("FLUSHALL", []),
        ]
        for (verb, arguments) in writes { c.send(verb, arguments) }
        // Removing an id that has no profile writes nothing, so nothing can fail.
        c.send("DEL", ["missing"])
        try c.flush()
        for (verb, _) in writes {
            let reply = try c.line()
            #expect(reply.hasPrefix("ERROR STORE "), "\(verb) under \(code): \(reply)")
            #expect(!reply.contains(directory), "an error names a file of the server: \(reply)")
        }
        #expect(try c.line() == "NOTFOUND missing")

        // Reads: from the cache (warm), from the store (cold), on this and on a new connection.
        let other = try server.connect()
        for reader in [c, other] {
            #expect(try reader.get(Array("warm".utf8))?.name == Array("before".utf8))
            #expect(try reader.get(Array("cold".utf8))?.name == Array("from disk".utf8))
            #expect(try reader.mget([Array("gone".utf8), Array("new1".utf8)]).map { $0?.name } == [Array("to delete".utf8), nil])
            #expect(try reader.exists(Array("new2".utf8)) == false)
            #expect(try reader.count() == 3)
            #expect(try reader.recent(10) == recentBefore)
        }
        let stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
        #expect(stats["errors"] == "\(writes.count)")
        #expect(stats["cmd_set"] == "2")
        #expect(stats["cmd_del"] == "0")

        // The fault clears: the same connection writes again, no restart.
        server.store.setFault(nil)
        try c.set(Profile(userId: "warm", name: "after", portraitUri: "w2"))
        #expect(try c.mset([Profile(userId: "new1", name: "n", portraitUri: "u")]) == 1)
        #expect(try c.update(Array("cold".utf8), name: Array("updated".utf8)))
        #expect(try c.del(Array("gone".utf8)))
        #expect(try other.get(Array("warm".utf8))?.name == Array("after".utf8))
        #expect(try other.recent(10).map { String(decoding: $0.userId, as: UTF8.self) } == ["cold", "new1", "warm"])
        // Stopping merges everything: the file holds what was acknowledged, and nothing that failed.
        server.stop()
        #expect(try rowsOnDisk(path) == ["cold": "updated", "new1": "n", "warm": "after"])
    }

    /// The same over RESP: a failed write, or a transaction, answers `-STORE <reason>` and
    /// changes nothing; its reads go on.
    @Test func anInjectedFaultFailsRESPWritesAndTransactionsWhole() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/profiles.sqlite3"
        let server = try InProcessServer(path: path)
        let resp = try server.connectRESP()
        #expect(try resp.call("HSET", "a", "name", "before") == ":1\r\n")
        server.store.setFault(SQLITE_IOERR)
        let single = try resp.call("HSET", "a", "name", "after")
        #expect(single.hasPrefix("-STORE "), "\(single)")
        #expect(!single.contains(directory))
        #expect(try resp.call("MULTI") == "+OK\r\n")
        #expect(try resp.call("HSET", "b", "name", "new") == "+QUEUED\r\n")
        #expect(try resp.call("DEL", "a") == "+QUEUED\r\n")
        #expect(try resp.call("EXEC").hasPrefix("-STORE "))
        #expect(try resp.call("HGETALL", "a") == "*2\r\n$4\r\nname\r\n$6\r\nbefore\r\n")
        #expect(try resp.call("EXISTS", "b") == ":0\r\n")
        server.store.setFault(nil)
        #expect(try resp.call("MULTI") == "+OK\r\n")
        #expect(try resp.call("HSET", "b", "name", "new") == "+QUEUED\r\n")
        #expect(try resp.call("DEL", "a") == "+QUEUED\r\n")
        #expect(try resp.call("EXEC") == "*2\r\n:1\r\n:1\r\n")
        server.stop()
        #expect(try rowsOnDisk(path) == ["b": "new"])
    }

    /// An in-process server whose reads fail while `fault` is on, holding `count` profiles
    /// `big0`, `big1`... of the longest values, every byte escaped in replies (VALUE lines of
    /// 9.2 KB), each read once so that the cache holds it; and a connection to it.
    private func serverWithCachedLongProfiles(_ count: Int, in directory: String) throws
        -> (InProcessServer, ReadFault, ProfileConnection, [String]) {
        let fault = ReadFault()
        let server = try InProcessServer(path: directory + "/profiles.sqlite3", wrapReader: { FailingReader($0, fault: fault) })
        let c = try server.connect()
        let ids = (0..<count).map { "big\($0)" }
        let name = String(repeating: "\u{01}", count: 256)
        let uri = String(repeating: "\u{01}", count: 2048)
        for id in ids { c.send("SET", [id, name, uri]) }
        try c.flush()
        for _ in ids { #expect(try c.line() == "STORED") }
        #expect(try c.mget(ids.map { Array($0.utf8) }).allSatisfy { $0 != nil })
        return (server, fault, c, ids)
    }

    /// A read of the store that fails once a reply has outgrown the worker's 256 KiB scratch,
    /// and part of it waits in the connection's queue: the request's whole reply is ERROR
    /// STORE, and the next request on the same connection is answered.
    @Test(arguments: ["MGET", "RECENT", "SCAN"])
    func aReadFailingPastTheReplyScratchGetsOnlyStoreError(verb: String) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // 100 VALUE lines of 9.2 KB: some 900 KB.
        let (server, fault, c, ids) = try serverWithCachedLongProfiles(100, in: directory)
        let request = switch verb {
        case "MGET": "MGET \(ids.joined(separator: " ")) freshmiss\n"
        case "RECENT": "RECENT 1000\n"
        default: "SCAN \"\" 1000\n"
        }

        fault.isOn = true
        // The first PONG is in the scratch when the reply begins, and leaves with its first part.
        c.sendRaw(Array(("PING\n" + request + "PING\n").utf8))
        try c.flush()
        #expect(try c.line() == "PONG")
        let reply = try c.line()
        #expect(reply.hasPrefix("ERROR STORE "), "\(reply.prefix(60))")
        #expect(try c.line() == "PONG")
        if verb == "MGET" {
            // The 100 cached lines came before the lookup that failed.
            #expect(server.statistic("cache_hits") == 100)
        }

        // The store reads again: the same connection gets the whole reply.
        fault.isOn = false
        c.sendRaw(Array(request.utf8))
        try c.flush()
        #expect(try c.readLines().count == (verb == "MGET" ? 101 : 100))
    }

    /// An MGET whose reply reaches the 1 MiB high-water mark is finished as the client reads;
    /// the ids it has left are read from the store first, so a read failing among them still
    /// makes the whole reply ERROR STORE, with nothing of it sent.
    @Test func aReadFailingPastTheHighWaterMarkGetsOnlyStoreError() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // 150 VALUE lines of 9.2 KB: 1.4 MB, past the mark, all cached; then an id the cache
        // does not know, which only the store can answer.
        let (server, fault, c, ids) = try serverWithCachedLongProfiles(150, in: directory)
        defer { server.stop() }
        let request = "MGET \(ids.joined(separator: " ")) freshmiss\n"

        fault.isOn = true
        c.sendRaw(Array((request + "PING\n").utf8))
        try c.flush()
        let reply = try c.line()
        let isStoreError = reply.hasPrefix("ERROR STORE ")
        #expect(isStoreError, "\(reply.prefix(60))")
        #expect(try c.line() == "PONG")

        fault.isOn = false
        c.sendRaw(Array(request.utf8))
        try c.flush()
        #expect(try c.readLines().count == 151)
    }

    /// A real full disk: a 4 MiB tmpfs filled up with another file, then freed again.
    @Test func aFullFilesystemFailsWritesUntilThereIsRoomAgain() throws {
        let mountPoint = try makeTemporaryDirectory()
        defer { removeDirectory(mountPoint) }
        guard mount("tmpfs", mountPoint, "tmpfs", 0, "size=4m,mode=0755") == 0 else {
            print("skipped: mounting a size-limited tmpfs is not permitted here (\(String(cString: strerror(errno))))")
            return
        }
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let path = mountPoint + "/profiles.sqlite3"
        let server = try TestServer(["--db", path])
        let c = try server.connect()
        var acknowledged: [String: String] = [:]
        try c.set(Profile(userId: "kept", name: "before", portraitUri: "k"))
        acknowledged["kept"] = "before"

        // Full, then 512 KiB given back: a few batches commit before one runs out of room.
        let filler = mountPoint + "/filler"
        fillFilesystem(with: filler)
        var status = stat()
        stat(filler, &status)
        truncate(filler, max(0, status.st_size - (512 << 10)))

        // Writes of about 50 KB each until the store runs out of room; the bound is far beyond
        // what 4 MiB can hold.
        let uri = String(repeating: "u", count: 2000)
        var failedIds: [String] = []
        for batch in 0..<200 where failedIds.isEmpty {
            let ids = (0..<25).map { "b\(batch)-\($0)" }
            c.send("MSET", ids.flatMap { [$0, "batch \(batch)", uri] })
            try c.flush()
            let reply = try c.line()
            if reply == "STORED 25" {
                for id in ids { acknowledged[id] = "batch \(batch)" }
            } else {
                #expect(reply.hasPrefix("ERROR STORE "), "\(reply)")
                failedIds = ids
            }
        }
        #expect(!failedIds.isEmpty, "the store never ran out of room")
        print("reliability full disk: \(acknowledged.count) profiles acknowledged before SQLITE_FULL")
        // A small write may still fit; either way the reply tells the truth, and reads go on.
        let small = try c.roundTrip("SET kept after k\n")
        if small == "STORED" {
            acknowledged["kept"] = "after"
        } else {
            #expect(small.hasPrefix("ERROR STORE "), "\(small)")
        }
        #expect(try c.get(Array("kept".utf8)).map { String(decoding: $0.name, as: UTF8.self) } == acknowledged["kept"])
        for id in failedIds.prefix(3) { #expect(try c.exists(Array(id.utf8)) == false) }
        // COUNT needs no room: it is kept as writes commit.
        #expect(try c.roundTrip("COUNT\n") == "COUNT \(acknowledged.count)")

        // Room again: the same server and connection write, no restart.
        unlink(filler)
        try c.set(Profile(userId: "kept", name: "again", portraitUri: "k"))
        acknowledged["kept"] = "again"
        #expect(try c.mset(failedIds.map { Profile(userId: $0, name: "retried", portraitUri: "r") }) == failedIds.count)
        for id in failedIds { acknowledged[id] = "retried" }

        // And all of it is on disk, the way it was acknowledged.
        #expect(exitCode(server.stop()) == 0)
        #expect(try rowsOnDisk(path) == acknowledged)
        #expect(!server.log.contains("level=error"), "\(server.log)")
    }
}

    /// The store's directory made read-only under a server run as an unprivileged user (root
    /// ignores the mode): writes go on into the files already open until the write log must
    /// begin its next 64 MiB segment, which cannot be made. From then each write gets ERROR
    /// STORE and /healthz answers 503 with the reason; once the directory is writable again
    /// the next write commits and /healthz answers 200 at once.
    @Test func aReadOnlyStoreDirectoryIsReportedUntilItIsWritableAgain() throws {
        guard getuid() == 0, access("/usr/bin/setpriv", X_OK) == 0 else {
            print("skipped: running profiled as an unprivileged user needs root and setpriv")
            return
        }
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        chmod(directory, 0o755)
        let store = directory + "/store"
        mkdir(store, 0o755)
        chown(store, 65534, 65534)
        defer { chmod(store, 0o755) }
        let server = try TestServer(["--db", store + "/profiles.sqlite3", "--metrics", "127.0.0.1:0"], directory: directory,
                                    launcher: ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        defer { server.stop() }
        let metrics = try metricsPort(server.log)
        let c = try server.connect()
        try c.set(Profile(userId: "before", name: "b", portraitUri: "b"))
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)

        chmod(store, 0o555)
        // MSETs of about 50 KB, 20 at a time: the first segment fills after some 1,300 of them.
        let uri = String(repeating: "u", count: 2000)
        var refused: String? = nil
        for round in 0..<200 where refused == nil {
            for batch in 0..<20 {
                c.send("MSET", (0..<25).flatMap { ["b\(round)-\(batch)-\($0)", "batch \(batch)", uri] })
            }
            try c.flush()
            for _ in 0..<20 {
                let reply = try c.line()
                if reply != "STORED 25" && refused == nil { refused = reply }
            }
        }
        #expect(refused?.hasPrefix("ERROR STORE ") == true, "\(refused ?? "every write was stored")")
        let health = try httpGet(port: metrics, path: "/healthz")
        #expect(health.status == 503, "\(health.body)")
        print("read-only directory: \(refused ?? "-"); /healthz \(health.status) \(health.body)")

        chmod(store, 0o755)
        try c.set(Profile(userId: "after", name: "a", portraitUri: "a"))
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)
        #expect(try c.get(Array("after".utf8))?.name == Array("a".utf8))
    }

extension ReliabilityStorageFaultTests {
    /// A full disk under writes: /healthz answers 503 with the reason and /metrics names it
    /// while writes fail, 200 again as soon as one commits; SIGTERM while the disk is full
    /// exits within seconds though the merger cannot finish, says so in its exit status, and
    /// the next start has every acknowledged write.
    @Test func aFullDiskIsReportedAndDoesNotHoldUpTheStop() throws {
        let mountPoint = try makeTemporaryDirectory()
        defer { removeDirectory(mountPoint) }
        guard mount("tmpfs", mountPoint, "tmpfs", 0, "size=4m,mode=0755") == 0 else {
            print("skipped: mounting a size-limited tmpfs is not permitted here (\(String(cString: strerror(errno))))")
            return
        }
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let path = mountPoint + "/profiles.sqlite3"
        let server = try TestServer(["--db", path, "--metrics", "127.0.0.1:0"])
        let metrics = try metricsPort(server.log)
        let c = try server.connect()
        var acknowledged: [String: String] = [:]
        let uri = String(repeating: "u", count: 2000)
        let filler = mountPoint + "/filler"
        /// MSETs of about 50 KB until one fails; returns its ids.
        func writeUntilFull(_ round: Int) throws -> [String] {
            for batch in 0..<200 {
                let ids = (0..<25).map { "r\(round)-\(batch)-\($0)" }
                c.send("MSET", ids.flatMap { [$0, "batch \(batch)", uri] })
                try c.flush()
                let reply = try c.line()
                guard reply == "STORED 25" else {
                    #expect(reply.hasPrefix("ERROR STORE "), "\(reply)")
                    return ids
                }
                for id in ids { acknowledged[id] = "batch \(batch)" }
            }
            return []
        }
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)

        fillFilesystem(with: filler)
        #expect(!(try writeUntilFull(1)).isEmpty, "the store never ran out of room")
        let health = try httpGet(port: metrics, path: "/healthz")
        #expect(health.status == 503)
        #expect(health.body.contains("the disk is full"), "\(health.body)")
        let exposition = try httpGet(port: metrics, path: "/metrics").body
        #expect(exposition.contains("profiled_store_refusing_writes{reason=\"disk_full\"} 1\n"), "\(exposition)")
        #expect(exposition.contains("profiled_store_refusing_writes{reason=\"io_error\"} 0\n"))

        // Room again: the next write commits, and health says so at once.
        unlink(filler)
        try c.set(Profile(userId: "kept", name: "again", portraitUri: "k"))
        acknowledged["kept"] = "again"
        #expect(try httpStatus(port: metrics, path: "/healthz") == 200)
        #expect(try httpGet(port: metrics, path: "/metrics").body.contains("profiled_store_refusing_writes{reason=\"disk_full\"} 0\n"))

        // Full again, and stopped while full.
        fillFilesystem(with: filler)
        #expect(!(try writeUntilFull(2)).isEmpty, "the store never ran out of room")
        kill(server.pid, SIGTERM)
        guard let status = server.waitForExit(seconds: 10) else {
            Issue.record("SIGTERM with the disk full: still running after 10 s")
            server.stop(signal: SIGKILL)
            return
        }
        // 2: writes were left in the write log; 0 would mean the merger found room after all.
        #expect([0, 2].contains(exitCode(status)), "exit status \(exitCode(status))")
        if exitCode(status) == 2 { #expect(server.log.contains("the next start merges it"), "\(server.log)") }

        unlink(filler)
        let restarted = try TestServer(["--db", path])
        #expect(exitCode(restarted.stop()) == 0)
        #expect(try rowsOnDisk(path) == acknowledged)
    }
}

/// Writes `path` until the filesystem holding it has no room left.
func fillFilesystem(with path: String) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    guard fd >= 0 else { return }
    defer { close(fd) }
    let chunk = [UInt8](repeating: 0xAB, count: 4096)
    // 1 GiB at most, should the filesystem be far larger than asked for.
    for _ in 0..<(1 << 18) {
        if chunk.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) <= 0 { return }
    }
}

/// user_id -> name of every row in a store file, read with a connection of our own.
func rowsOnDisk(_ path: String) throws -> [String: String] {
    var db: OpaquePointer? = nil
    defer { sqlite3_close(db) }
    guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
        throw TestFailure("cannot open \(path)")
    }
    var statement: OpaquePointer? = nil
    guard sqlite3_prepare_v2(db, "SELECT user_id, name FROM profiles", -1, &statement, nil) == SQLITE_OK else {
        throw TestFailure("cannot read \(path): \(String(cString: sqlite3_errmsg(db)))")
    }
    defer { sqlite3_finalize(statement) }
    var rows: [String: String] = [:]
    while sqlite3_step(statement) == SQLITE_ROW {
        rows[String(cString: sqlite3_column_text(statement, 0))] = String(cString: sqlite3_column_text(statement, 1))
    }
    return rows
}

/// Whether the `FailingReader`s fail. Any thread.
private final class ReadFault: Sendable {
    private let failing = Atomic<Bool>(false)

    var isOn: Bool {
        get { failing.load(ordering: .relaxed) }
        set { failing.store(newValue, ordering: .relaxed) }
    }

    func check() throws {
        if isOn { throw StoreError(kind: .io, code: "SQLite code \(SQLITE_IOERR)", message: "disk I/O error (injected)", path: "") }
    }
}

/// A worker's reader that fails while its `ReadFault` is on: a lookup at once, RECENT and SCAN
/// after handing out every row, as a read that breaks at its last step.
///
/// Threading: the worker's thread.
private final class FailingReader: ProfileReader {
    private let reader: any ProfileReader
    private let fault: ReadFault

    init(_ reader: any ProfileReader, fault: ReadFault) {
        self.reader = reader
        self.fault = fault
    }

    func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R {
        try fault.check()
        return try reader.lookup(userId, body)
    }

    func recent(limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        try reader.recent(limit: limit, each)
        try fault.check()
    }

    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) throws -> Void) throws {
        try reader.scan(after: after, limit: limit, each)
        try fault.check()
    }

    func beginRead() throws { try reader.beginRead() }

    func endRead() { reader.endRead() }
}
