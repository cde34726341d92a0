import Glibc
import ProfilePostgres
import ProfileStore
import ProfileSystem
import Synchronization

/// A store in a PostgreSQL database that several nodes share (docs/CLUSTER.md).
///
/// Every connection it opens is its own owner's: the write path's, one per fetcher (readers),
/// the listener's (`profiled listen`: changes made anywhere, and the heartbeats that prove
/// them current), and a counter's (the row count STATS shows). Each reconnects by itself after
/// a failure, with backoff, so the node serves again without a restart.
///
/// The lease: the listener sends a heartbeat through PostgreSQL every quarter of the lease and
/// records when; when it comes back, every change committed before it was sent has come back
/// too (notifications arrive in commit order), so the cache may answer until that sending time
/// plus the lease. Without a fresh heartbeat, reads bypass the cache.
///
/// Threading: thread-safe.
public final class PostgresProfileStore: SharedProfileStore, @unchecked Sendable {
    let conninfo: String
    let leaseNanos: Int
    /// Every statement's deadline, and a commit's whole budget: a write that cannot finish in
    /// it is answered with ERROR STORE.
    static let statementNanos = 5_000_000_000
    /// Named for logs and errors: the server, database and user, never a password.
    public let description: String
    private let warn: @Sendable (String, String) -> Void

    /// Until when the cache may answer (monotonic nanoseconds); 0 while no heartbeat came back.
    private let cacheTrustedUntil = Atomic<Int>(0)
    private let rowCountSeen = Atomic<Int>(0)
    private let reachable = Atomic<Bool>(true)
    private let statistics = Mutex(SharedStoreStatistics())
    private let stopping = Atomic<Bool>(false)
    /// The backends of this store's write paths, whose notifications echo this server's commits.
    private let writerBackends = Mutex<[Int32]>([])
    private var threads: [pthread_t] = []
    private let threadsLock = ConditionLock()

    /// Connects (waiting at most `connectSeconds`), and creates the schema when it is absent.
    /// - Throws: one sentence for the operator, naming the server but no password.
    public init(conninfo: String, leaseMilliseconds: Int, connectSeconds: Int = 10,
                warn: @escaping @Sendable (_ message: String, _ error: String) -> Void) throws(PostgresStartupError) {
        self.conninfo = conninfo
        leaseNanos = leaseMilliseconds * 1_000_000
        self.warn = warn
        let connection = try Self.connectAndPrepareSchema(conninfo: conninfo, connectSeconds: connectSeconds)
        defer { connection.close() }
        description = connection.server
        do {
            let count = try connection.query("SELECT count(*) FROM profiles", deadline: monotonicNanos() + Self.statementNanos)
            rowCountSeen.store(count.int(0, 0) ?? 0, ordering: .relaxed)
        } catch {
            throw PostgresStartupError("cannot count the profiles: \(error)")
        }
    }

    /// Creates the schema in the database at `conninfo`, or brings it up to date, as the first
    /// node would, and returns the server as `host:port (database D, user U)`; for
    /// `profiled --init-schema`, which an owner of the schema runs once before the nodes start.
    /// - Throws: one sentence for the operator, naming the server but no password.
    public static func prepareSchema(conninfo: String, connectSeconds: Int = 10) throws(PostgresStartupError) -> String {
        let connection = try connectAndPrepareSchema(conninfo: conninfo, connectSeconds: connectSeconds)
        defer { connection.close() }
        return connection.server
    }

    private static func connectAndPrepareSchema(conninfo: String, connectSeconds: Int) throws(PostgresStartupError)
        -> PostgresConnection {
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(conninfo: conninfo, applicationName: "profiled",
                                                deadline: monotonicNanos() + connectSeconds * 1_000_000_000)
        } catch {
            throw PostgresStartupError(error.description)
        }
        do {
            try PostgresSchema.prepare(connection, deadline: monotonicNanos() + connectSeconds * 1_000_000_000)
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// A new connection for one of the store's owners, by the deadline.
    func connect(_ applicationName: String, deadline: Int) throws(PostgresError) -> PostgresConnection {
        try PostgresConnection(conninfo: conninfo, applicationName: applicationName, deadline: deadline)
    }

    /// A PostgreSQL failure as the server reports it. The reason for clients says what failed
    /// and, for a refused statement, its SQLSTATE; it never names the server's address, the
    /// database, a user or a row, which only the log gets (`error.description`).
    func storeError(_ error: PostgresError) -> StoreError {
        switch error.kind {
        case .connect, .connectionLost, .timeout:
            return StoreError(kind: .unreachable, message: error.description, path: description,
                              clientReason: Self.unreachable)
        case .server(let sqlstate):
            return StoreError(kind: .other, message: error.description, path: description,
                              clientReason: "the shared store refused the statement (SQLSTATE \(sqlstate))")
        }
    }

    /// What clients and /healthz are told while PostgreSQL cannot be reached.
    static let unreachable = "the shared store cannot be reached"

    /// Records whether PostgreSQL answered; a change is logged once.
    func noteReachable(_ ok: Bool, _ problem: String? = nil) {
        let was = reachable.exchange(ok, ordering: .relaxed)
        if !ok && was { warn("PostgreSQL cannot be reached; retrying", problem ?? "") }
    }

    func countReconnect() { statistics.withLock { $0.reconnects += 1 } }

    // MARK: ProfileStore

    /// A write path on a connection of its own; a server may open several, whose commits
    /// then run side by side, ordered where they meet by the advisory locks.
    public func openWritePath() throws -> any ProfileWritePath {
        PostgresWritePath(store: self)
    }

    public func makeSharedReader() throws -> any SharedProfileReader {
        PostgresReader(store: self)
    }

    public var rowCount: Int { rowCountSeen.load(ordering: .relaxed) }

    func adjustRowCount(by delta: Int) {
        if delta != 0 { rowCountSeen.add(delta, ordering: .relaxed) }
    }

    func setRowCount(_ count: Int) { rowCountSeen.store(count, ordering: .relaxed) }

    public var leaseNanoseconds: Int { leaseNanos }

    public func cacheMayAnswer(at now: Int) -> Bool {
        now < cacheTrustedUntil.load(ordering: .relaxed)
    }

    public var kindName: StaticString { "postgres" }

    public var unreachableReason: String? {
        reachable.load(ordering: .relaxed) ? nil : Self.unreachable
    }

    public var sharedStatistics: SharedStoreStatistics { statistics.withLock { $0 } }

    // MARK: Following changes

    public func follow(invalidate: @escaping @Sendable (UnsafeBufferPointer<UnsafeRawBufferPointer>, ChangeOrigin) -> Void,
                       invalidateAll: @escaping @Sendable (ChangeOrigin) -> Void) throws {
        let listener = Listener(store: self, invalidate: invalidate, invalidateAll: invalidateAll)
        threadsLock.lock()
        threads.append(startThread("pg-listen") { listener.run() })
        threads.append(startThread("pg-count") { [self] in countLoop() })
        threadsLock.unlock()
    }

    public func stopFollowing() {
        stopping.store(true, ordering: .relaxed)
        threadsLock.lock()
        let running = threads
        threads.removeAll()
        threadsLock.unlock()
        for thread in running { pthread_join(thread, nil) }
    }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// A write path connected on the backend `pid`: its commits' notifications are this server's.
    func writerConnected(_ pid: Int32) { writerBackends.withLock { $0.append(pid) } }

    /// A write path is about to close the connection on `pid`: forgotten first, so that a
    /// later backend given the same process id is never taken for this server's.
    func writerClosing(_ pid: Int32) {
        writerBackends.withLock { backends in
            if let index = backends.firstIndex(of: pid) { backends.remove(at: index) }
        }
    }

    /// Where the notification of the backend `pid` comes from.
    func origin(ofBackend pid: Int32) -> ChangeOrigin {
        writerBackends.withLock { $0.contains(pid) } ? .thisServer : .elsewhere
    }

    /// The listener trusts the cache up to here (a heartbeat sent at `sentAt` came back).
    func heartbeatReturned(sentAt: Int) {
        let until = sentAt + leaseNanos
        var current = cacheTrustedUntil.load(ordering: .relaxed)
        while until > current {
            let (exchanged, original) = cacheTrustedUntil.compareExchange(expected: current, desired: until, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
    }

    /// The cache may have missed changes: nothing it holds is vouched for until a heartbeat
    /// sent from now on comes back.
    func distrustCache() { cacheTrustedUntil.store(0, ordering: .relaxed) }

    func recordInvalidation(lagSeconds: Double?, ids: Int) {
        statistics.withLock { statistics in
            statistics.invalidationsReceived += ids
            guard let lag = lagSeconds else { return }
            let bounds = SharedStoreStatistics.invalidationLagBounds
            if statistics.invalidationLagBuckets.isEmpty {
                statistics.invalidationLagBuckets = Array(repeating: 0, count: bounds.count + 1)
            }
            let bucket = bounds.firstIndex { lag <= $0 } ?? bounds.count
            statistics.invalidationLagBuckets[bucket] += 1
            statistics.invalidationLagCount += 1
            statistics.invalidationLagSumSeconds += max(0, lag)
        }
    }

    /// Keeps the row count STATS shows close: counts the table every second on a connection of
    /// its own (COUNT itself counts when asked).
    private func countLoop() {
        var connection: PostgresConnection?
        while !isStopping {
            do throws(PostgresError) {
                if connection == nil || connection!.isBroken {
                    connection = try connect("profiled", deadline: monotonicNanos() + Self.statementNanos)
                }
                let count = try connection!.query("SELECT count(*) FROM profiles", deadline: monotonicNanos() + Self.statementNanos)
                rowCountSeen.store(count.int(0, 0) ?? 0, ordering: .relaxed)
            } catch {
                connection?.close()
                connection = nil
            }
            for _ in 0..<10 where !isStopping { usleep(100_000) }
        }
        connection?.close()
    }
}

/// The listener: one connection named `profiled listen` that LISTENs for changes and sends
/// the heartbeats, on a thread of its own.
///
/// Threading: its thread only.
private final class Listener: @unchecked Sendable {
    let store: PostgresProfileStore
    let invalidate: @Sendable (UnsafeBufferPointer<UnsafeRawBufferPointer>, ChangeOrigin) -> Void
    let invalidateAll: @Sendable (ChangeOrigin) -> Void
    /// A heartbeat every quarter of the lease, so that two may be lost before it runs out.
    let heartbeatNanos: Int
    /// Heartbeats in flight: number to sending time.
    var sent: [Int: Int] = [:]
    var nextHeartbeat = 0
    let token = UInt64.random(in: 1 ... .max)

    init(store: PostgresProfileStore, invalidate: @escaping @Sendable (UnsafeBufferPointer<UnsafeRawBufferPointer>, ChangeOrigin) -> Void,
         invalidateAll: @escaping @Sendable (ChangeOrigin) -> Void) {
        self.store = store
        self.invalidate = invalidate
        self.invalidateAll = invalidateAll
        heartbeatNanos = max(5_000_000, store.leaseNanos / 4)
    }

    func run() {
        var backoff = 50_000
        var first = true
        while !store.isStopping {
            do throws(PostgresError) {
                let connection = try store.connect("profiled listen", deadline: monotonicNanos() + PostgresProfileStore.statementNanos)
                defer { connection.close() }
                try connection.execute("LISTEN \(PostgresSchema.channel)", deadline: monotonicNanos() + PostgresProfileStore.statementNanos)
                // Whatever changed while nobody listened is unknown: forget it all. The cache
                // answers again once a heartbeat sent after this comes back.
                store.distrustCache()
                invalidateAll(.elsewhere)
                if !first { store.countReconnect() }
                first = false
                store.noteReachable(true)
                backoff = 50_000
                try listen(on: connection)
            } catch {
                store.distrustCache()
                store.noteReachable(false, error.description)
                if store.isStopping { break }
                usleep(useconds_t(backoff))
                backoff = min(backoff * 2, 1_000_000)
            }
        }
    }

    private func listen(on connection: PostgresConnection) throws(PostgresError) {
        sent.removeAll()
        var dueAt = monotonicNanos()
        while !store.isStopping {
            let now = monotonicNanos()
            if now >= dueAt {
                nextHeartbeat += 1
                sent[nextHeartbeat] = now
                // A heartbeat that does not come back within the lease means the connection
                // hangs: give it up and connect again.
                if let oldest = sent.values.min(), now - oldest > store.leaseNanos {
                    throw PostgresError(kind: .timeout, message: "no heartbeat came back within the lease", server: connection.server)
                }
                _ = try connection.query("SELECT pg_notify($1, $2)",
                                         [Array(PostgresSchema.channel.utf8), Array("H \(token) \(nextHeartbeat)".utf8)],
                                         deadline: now + store.leaseNanos)
                dueAt = now + heartbeatNanos
            }
            for notification in try connection.notifications(until: min(dueAt, monotonicNanos() + heartbeatNanos)) {
                handle(notification.payload, from: notification.senderPID)
            }
        }
    }

    private func handle(_ payload: [UInt8], from sender: Int32) {
        guard let kind = payload.first, payload.count >= 2 else { return }
        let rest = payload[2...]
        switch kind {
        case UInt8(ascii: "H"):
            let words = rest.split(separator: 0x20)
            guard words.count == 2, UInt64(String(decoding: words[0], as: UTF8.self)) == token,
                  let number = Int(String(decoding: words[1], as: UTF8.self)), let sentAt = sent[number] else { return }
            for old in sent.keys where old <= number { sent[old] = nil }
            store.heartbeatReturned(sentAt: sentAt)
        case UInt8(ascii: "F"):
            invalidateAll(store.origin(ofBackend: sender))
            store.recordInvalidation(lagSeconds: lag(rest), ids: 1)
        case UInt8(ascii: "I"):
            guard let space = rest.firstIndex(of: 0x20) else { return }
            let ids = Self.ids(rest[(space + 1)...])
            ids.withUnsafeBufferPointer { views in
                payload.withUnsafeBytes { bytes in
                    let pointers = views.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }
                    let origin = store.origin(ofBackend: sender)
                    pointers.withUnsafeBufferPointer { invalidate($0, origin) }
                }
            }
            store.recordInvalidation(lagSeconds: lag(rest[..<space]), ids: ids.count)
        default:
            return
        }
    }

    /// Seconds since the stamp (epoch seconds by the database's clock) at the start of `text`.
    private func lag(_ text: ArraySlice<UInt8>) -> Double? {
        let stampText = text.prefix { $0 != 0x20 }
        guard let stamp = Double(String(decoding: stampText, as: UTF8.self)) else { return nil }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 - stamp
    }

    /// The ranges of the ids in `<length>:<id>...` (lengths in bytes).
    static func ids(_ text: ArraySlice<UInt8>) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        var index = text.startIndex
        while index < text.endIndex {
            var length = 0
            while index < text.endIndex, text[index] != UInt8(ascii: ":") {
                let digit = text[index] &- UInt8(ascii: "0")
                guard digit < 10 else { return ranges }
                length = length * 10 + Int(digit)
                index += 1
            }
            index += 1
            guard index + length <= text.endIndex else { return ranges }
            ranges.append(index..<index + length)
            index += length
        }
        return ranges
    }
}
