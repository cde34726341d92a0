import ProfileTestSupport
import Glibc
import ProfileClient
import ProfileStore
import Testing

/// SCHED_IDLE; Glibc declares it only with _GNU_SOURCE.
private let schedIdle: Int32 = 5

/// Stands between the server and its folder: records on which thread, and under which
/// scheduling policy, each merge runs. The first merge holds until the server abandons it;
/// later ones go through.
private final class WatchedFolder: WriteLogFolder, @unchecked Sendable {
    struct Merge: Equatable {
        var thread: String
        var idle: Bool
        var abandoned: Bool
    }

    let inner: any WriteLogFolder
    let merges = Locked<[Merge]>([])
    /// Set once the first merge is being held.
    let holding = Locked(false)

    init(_ inner: any WriteLogFolder) { self.inner = inner }

    func fold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws {
        let thread = String(readText("/proc/thread-self/comm").prefix { $0 != "\n" })
        let idle = sched_getscheduler(0) == schedIdle
        let first = merges.withLock { $0.isEmpty }
        if first {
            holding.withLock { $0 = true }
            // Held for at most 20 s: long enough for the test to start waiting for it.
            for _ in 0..<20_000 where !abandon() { usleep(1000) }
            if abandon() {
                merges.withLock { $0.append(Merge(thread: thread, idle: idle, abandoned: true)) }
                throw StoreError(kind: .interrupted, resultCode: 9, message: "abandoned", path: "test")
            }
        }
        try inner.fold(generation: generation, abandonIf: abandon)
        merges.withLock { $0.append(Merge(thread: thread, idle: idle, abandoned: false)) }
    }

    func foldAll() throws { try inner.foldAll() }
    func logRows() throws -> Int { try inner.logRows() }
    func deleteEverything() throws { try inner.deleteEverything() }
}

/// Fails every merge while `failing` is set, as a full disk would.
private final class FailingFolder: WriteLogFolder, @unchecked Sendable {
    let inner: any WriteLogFolder
    let failing = Locked(true)
    let attempts = Locked(0)

    init(_ inner: any WriteLogFolder) { self.inner = inner }

    func fold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws {
        attempts.withLock { $0 += 1 }
        if failing.withLock({ $0 }) {
            throw StoreError(kind: .full, resultCode: 13, message: "database or disk is full", path: "test")
        }
        try inner.fold(generation: generation, abandonIf: abandon)
    }

    func foldAll() throws { try inner.foldAll() }
    func logRows() throws -> Int { try inner.logRows() }
    func deleteEverything() throws { try inner.deleteEverything() }
}

/// An in-process server whose folder is `wrap`'s wrapper around the real one; and the wrapper.
private func serverWithFolder<Folder: WriteLogFolder>(at path: String, folder wrap: (any WriteLogFolder) -> Folder)
    throws -> (InProcessServer, Folder) {
    nonisolated(unsafe) var made: Folder?
    let server = try InProcessServer(path: path) { folder in
        let wrapper = wrap(folder)
        made = wrapper
        return wrapper
    }
    return (server, made!)
}

/// Merging the write log is background work until somebody waits for it.
@Suite struct BackgroundMergeTests {
    /// Nobody waits for the merge after a SET: it runs on a thread of its own at SCHED_IDLE.
    /// A COUNT then waits for it: the background merge is abandoned and merged again at
    /// once, at the folder's priority; the COUNT sees the write.
    @Test func aMergeRunsAtIdlePriorityUntilACountWaitsForIt() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (server, folder) = try serverWithFolder(at: directory + "/p.db", folder: WatchedFolder.init)
        let c = try server.connect()
        try c.set(Profile(userId: "a", name: "n", portraitUri: "u"))
        for _ in 0..<10_000 where !folder.holding.withLock({ $0 }) { usleep(1000) }
        #expect(folder.holding.withLock { $0 })
        #expect(try c.get(Array("a".utf8))?.name == Array("n".utf8))
        #expect(folder.merges.withLock { $0 }.isEmpty)
        #expect(try c.count() == 1)
        #expect(folder.merges.withLock { $0 } == [
            .init(thread: "merge", idle: true, abandoned: true),
            .init(thread: "merge", idle: false, abandoned: false),
        ])
        server.stop()
    }

    /// A COUNT waits for the merge of the writes acknowledged before it. While merges fail it
    /// gets the failure, ERROR STORE, rather than a count that misses acknowledged writes; the
    /// writes themselves stay readable from the cache, and once a merge succeeds COUNT has them.
    @Test func tableReadsGetTheMergeFailureAndRecoverWithIt() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (server, folder) = try serverWithFolder(at: directory + "/p.db", folder: FailingFolder.init)
        let c = try server.connect()
        try c.set(Profile(userId: "a", name: "n", portraitUri: "u"))
        #expect(throws: ClientError.self) {
            do {
                _ = try c.count()
            } catch let error as ClientError {
                guard case .server(let code, let message) = error else { throw error }
                #expect(code == "STORE")
                #expect(message.contains("full"), "\(message)")
                throw error
            }
        }
        #expect(folder.attempts.withLock { $0 } >= 1)
        #expect(try c.get(Array("a".utf8))?.name == Array("n".utf8))
        folder.failing.withLock { $0 = false }
        // The folder retries after a pause. A COUNT that comes before the retry may still get
        // the failure of an attempt that began before the disk was "freed"; one comes back.
        var count: Int?
        for _ in 0..<100 where count == nil {
            do {
                count = try c.count()
            } catch {
                guard error.description.hasPrefix("ERROR STORE ") else { throw error }
                usleep(50_000)
            }
        }
        #expect(count == 1)
        server.stop()
    }
}
