import ProfileTestSupport
import Glibc
import ProfileClient
import ProfileStore
import Testing

/// SCHED_IDLE; Glibc declares it only with _GNU_SOURCE.
private let schedIdle: Int32 = 5

/// Passes every call on to the real folder; subclasses stand in for some of them.
private class ForwardingFolder: WriteLogFolder, @unchecked Sendable {
    let inner: any WriteLogFolder

    required init(_ inner: any WriteLogFolder) { self.inner = inner }

    func prepareFold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws -> Int {
        try inner.prepareFold(generation: generation, abandonIf: abandon)
    }

    func foldNextRange(abandonIf abandon: @escaping () -> Bool) throws -> FoldedRange {
        try inner.foldNextRange(abandonIf: abandon)
    }

    func foldAll() throws { try inner.foldAll() }
    func logRows() throws -> Int { try inner.logRows() }
    func deleteEverything() throws { try inner.deleteEverything() }
}

/// Records on which thread, and under which scheduling policy, each merge's first step (the
/// sort) runs. The first merge holds until the server abandons it; later ones go through.
private final class WatchedFolder: ForwardingFolder, @unchecked Sendable {
    struct Merge: Equatable {
        var thread: String
        var idle: Bool
        var abandoned: Bool
    }

    let merges = Locked<[Merge]>([])
    /// Set once the first merge is being held.
    let holding = Locked(false)

    override func prepareFold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws -> Int {
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
        let ranges = try inner.prepareFold(generation: generation, abandonIf: abandon)
        merges.withLock { $0.append(Merge(thread: thread, idle: idle, abandoned: false)) }
        return ranges
    }
}

/// Fails every merge while `failing` is set, as a full disk would.
private final class FailingFolder: ForwardingFolder, @unchecked Sendable {
    let failing = Locked(true)
    let attempts = Locked(0)

    override func prepareFold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws -> Int {
        attempts.withLock { $0 += 1 }
        if failing.withLock({ $0 }) {
            throw StoreError(kind: .full, resultCode: 13, message: "database or disk is full", path: "test")
        }
        return try inner.prepareFold(generation: generation, abandonIf: abandon)
    }
}

/// Holds each range of a merge until the test lets it through.
private final class GatedFolder: ForwardingFolder, @unchecked Sendable {
    /// Ranges let through so far, and the range (counted from 1) waiting at the gate.
    let allowed = Locked(0)
    let waiting = Locked<Int?>(nil)
    private let started = Locked(0)

    override func foldNextRange(abandonIf abandon: @escaping () -> Bool) throws -> FoldedRange {
        let number = started.withLock { $0 += 1; return $0 }
        // Held for at most 20 s, so that a failing test still ends.
        for _ in 0..<20_000 where allowed.withLock({ $0 }) < number {
            waiting.withLock { $0 = number }
            usleep(1000)
        }
        waiting.withLock { $0 = nil }
        return try inner.foldNextRange(abandonIf: abandon)
    }

    /// Waits (at most 20 s) until range `number` waits at the gate.
    func waitUntilRangeWaits(_ number: Int) {
        for _ in 0..<20_000 where waiting.withLock({ $0 }) != number { usleep(1000) }
    }
}

/// An in-process server whose folder is `wrap`'s wrapper around the real one; and the wrapper.
private func serverWithFolder<Folder: WriteLogFolder>(at path: String, rowsPerFoldRange: Int = 16_384,
                                                       pinLimitBytes: Int = 8 << 20,
                                                       folder wrap: (any WriteLogFolder) -> Folder)
    throws -> (InProcessServer, Folder) {
    nonisolated(unsafe) var made: Folder?
    let server = try InProcessServer(path: path, pinLimitBytes: pinLimitBytes, rowsPerFoldRange: rowsPerFoldRange) { folder in
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

    /// A generation is merged one range of ids at a time, and each range's cache entries are
    /// unpinned as soon as it is committed, not when the whole generation is: a writer held
    /// back by the pin limit waits for one range.
    @Test func eachMergedRangeUnpinsItsEntriesAtOnce() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (server, folder) = try serverWithFolder(at: directory + "/p.db", rowsPerFoldRange: 100,
                                                    folder: GatedFolder.init)
        let c = try server.connect()
        // One MSET: one transaction, so all in the first generation, merged in 10 ranges.
        let profiles = (0..<1000).map { Profile(userId: "user\(1000 + $0)", name: "n\($0)", portraitUri: "u") }
        #expect(try c.mset(profiles) == 1000)
        folder.waitUntilRangeWaits(1)
        #expect(server.statistic("cache_pinned_items") == 1000)
        #expect(server.statistic("unmerged_writes") == 1000)
        folder.allowed.withLock { $0 = 1 }
        folder.waitUntilRangeWaits(2)
        #expect(server.statistic("cache_pinned_items") == 900)
        // The generation's merge is not finished: its writes count until it is.
        #expect(server.statistic("unmerged_writes") == 1000)
        // The merged range reads from the table again once the cache lets its entries go.
        #expect(try c.get(Array("user1000".utf8))?.name == Array("n0".utf8))
        folder.allowed.withLock { $0 = .max }
        #expect(try c.count() == 1000)
        #expect(server.statistic("cache_pinned_items") == 0)
        #expect(server.statistic("unmerged_writes") == 0)
        server.stop()
    }

    /// A writer held back by the pin limit goes on once one range of the running merge has
    /// given its pins back, while the rest of the generation is still being merged.
    @Test func aWriteAtThePinLimitWaitsForOneRangeOnly() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // 1,000 VALUE lines of 20 bytes count 52,000 bytes against the limit, a range of 100
        // of them 5,200: over the limit after the MSET, under it after one range.
        let (server, folder) = try serverWithFolder(at: directory + "/p.db", rowsPerFoldRange: 100,
                                                    pinLimitBytes: 50_000, folder: GatedFolder.init)
        let c = try server.connect()
        let waiting = try server.connect()
        let profiles = (0..<1000).map { Profile(userId: "user\(1000 + $0)", name: "nm", portraitUri: "u") }
        #expect(try c.mset(profiles) == 1000)
        nonisolated(unsafe) let writer = waiting
        let setDone = Locked(false)
        let doneBeforeAnyRange = Locked(true)
        let doneWhileSecondRangeHeld = Locked(false)
        onThreads(2) { thread in
            if thread == 0 {
                // Answered only once the writer takes it: after the first range, or never.
                if (try? writer.set(Profile(userId: "late", name: "n", portraitUri: "u"))) != nil {
                    setDone.withLock { $0 = true }
                }
                return
            }
            folder.waitUntilRangeWaits(1)
            // While nothing is merged the writer is at the limit: the SET waits.
            usleep(200_000)
            doneBeforeAnyRange.withLock { $0 = setDone.withLock { $0 } }
            folder.allowed.withLock { $0 = 1 }
            folder.waitUntilRangeWaits(2)
            for _ in 0..<10_000 where !setDone.withLock({ $0 }) { usleep(1000) }
            doneWhileSecondRangeHeld.withLock { $0 = setDone.withLock { $0 } && folder.waiting.withLock { $0 } == 2 }
            folder.allowed.withLock { $0 = .max }
        }
        #expect(!doneBeforeAnyRange.withLock { $0 })
        #expect(doneWhileSecondRangeHeld.withLock { $0 })
        #expect(try c.count() == 1001)
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
