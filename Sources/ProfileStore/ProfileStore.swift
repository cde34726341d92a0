/// One profile as views into the store's memory.
///
/// The buffers are valid only inside the callback that received the row: copy
/// what must outlive it. Values are UTF-8 without NUL bytes.
///
/// Threading: a row belongs to the thread running the callback.
public struct ProfileRow {
    public var userId: UnsafeRawBufferPointer
    public var name: UnsafeRawBufferPointer
    public var portraitUri: UnsafeRawBufferPointer

    public init(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }
}

/// Reads profiles: what the table holds together with the writes a store has committed and
/// not yet merged into it, so that every read sees every committed write.
///
/// Threading: not thread-safe. One thread at a time uses a reader; each server
/// worker owns one.
public protocol ProfileReader: AnyObject {
    /// Looks a profile up and calls `body` with it, or with nil when there is none.
    func lookup<R>(_ userId: UnsafeRawBufferPointer, _ body: (ProfileRow?) throws -> R) throws -> R
    /// Up to `limit` profiles, newest first by write sequence; none when
    /// `limit` is not positive.
    func recent(limit: Int, _ each: (ProfileRow) throws -> Void) throws
    /// Up to `limit` profiles whose userId is strictly greater than `after` in
    /// byte order, ascending. An empty `after` starts at the beginning; a
    /// `limit` that is not positive gives none.
    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) throws -> Void) throws
    /// Opens a read transaction that later lookups share, saving each one the taking and
    /// releasing of the read locks. A lookup still sees every write committed before it
    /// began: the reader renews the transaction when the table it reads has moved on.
    func beginRead() throws
    /// Ends the read transaction `beginRead` opened.
    func endRead()
}

/// The server's way to write: it hands the store units of operations and learns when each
/// is committed, with what each operation found and left. How the store makes them durable,
/// and when and how it moves them into its table, is its own business.
///
/// Threading: `commit` and `close` from one thread at a time (the server's writer thread);
/// everything else from any thread.
public protocol ProfileWritePath: AnyObject, Sendable {
    /// Commits `units`, each all or none, in order, and calls `report` once for each, in
    /// order, once it is committed (durable as the store is configured to be, and visible to
    /// every reader) or has failed. Returns after the last report.
    ///
    /// May wait before committing when the store's merges have fallen behind (backpressure).
    ///
    /// - Parameters:
    ///   - knownProfile: what the caller knows of a profile that has had no write since the
    ///     store's table took its last one; asked on this thread, in commit order.
    ///   - report: the unit's index in `units` and its result; views in the result are valid
    ///     during the call only.
    func commit(_ units: [any WriteUnit], knownProfile: (UnsafeRawBufferPointer) -> KnownProfile,
                report: (Int, WriteResult) -> Void)
    /// Whether a commit started now would be prompt: no backpressure wait, no sync to disk,
    /// no round trip to another server. Such a commit may run on a thread that also serves
    /// reads. Any thread; the answer may be out of date at once.
    var commitsPromptly: Bool { get }
    /// What a cache in front of the store does with a profile a commit changed.
    var cacheAfterCommit: CacheAfterCommit { get }
    /// Profiles in the store now: exact, every committed write counted.
    var rowCount: Int { get }
    /// The write path's gauges and counters, for STATS and /metrics.
    var statistics: WritePathStatistics { get }
    /// Why the store refuses writes now (nil when it takes them): for /healthz and /metrics.
    /// Set by the first write that fails, whatever the cause, and cleared by the next that commits.
    var writeRefusal: WriteRefusal? { get }
    /// Makes everything committed durable and tidy (merged, checkpointed) before the process
    /// exits; the last call, after the last `commit`.
    func close() throws
}

/// What a cache in front of a store does with a profile a commit changed.
///
/// A plain value; any thread.
public enum CacheAfterCommit: Sendable {
    /// Takes the profile as the commit left it: nobody else writes the store, so nothing newer
    /// can have reached the cache first.
    case update
    /// Drops it: other servers write the store too, and a newer write of theirs may have been
    /// invalidated already between this commit and the cache's update; the next read fetches it.
    case invalidate
}

/// Why a store refuses writes: a reason for people, and a label from a fixed set for alerts.
///
/// A plain value; any thread.
public struct WriteRefusal: Sendable, Equatable {
    /// One of `labels`.
    public var label: String
    /// What /healthz says; names no file.
    public var reason: String

    /// Every label, so that /metrics can show each one, 0 or 1.
    public static let labels = ["disk_full", "io_error", "busy", "locked", "damaged", "unreachable", "merge_failing", "other"]

    public init(label: String, reason: String) {
        precondition(Self.labels.contains(label), "an unlisted refusal label")
        self.label = label
        self.reason = reason
    }

    /// A refusal for a write that failed with `error`.
    public init(_ error: StoreError) {
        let label = switch error.kind {
        case .full: "disk_full"
        case .io: "io_error"
        case .busy: "busy"
        case .locked: "locked"
        case .corrupt, .notADatabase, .newerSchema: "damaged"
        case .unreachable, .outcomeUnknown: "unreachable"
        case .interrupted, .other: "other"
        }
        self.init(label: label, reason: error.reason)
    }
}

/// The write path's gauges and counters.
///
/// A plain value; any thread.
public struct WritePathStatistics: Sendable {
    /// Writes committed and not yet merged into the table (each operation that changed
    /// something counts one).
    public var unmergedWrites = 0
    /// Memory the unmerged writes take, and its limit.
    public var bufferBytes = 0
    public var bufferLimitBytes = 0
    /// Commits held back because merges fell behind, and the time they waited.
    public var delayedCommits = 0
    public var delayNanoseconds = 0
    /// Merges finished, and the rows they wrote into the table.
    public var merges = 0
    public var mergedRows = 0
    /// Steps of merges that ran in the background and were given up, to run again at once,
    /// because someone came to wait for the merge.
    public var abandonedMergeSteps = 0
    /// Background syncs of the write log to disk (`--sync normal`; under `full` every commit
    /// syncs and this stays 0).
    public var logSyncs = 0

    public init() {}
}

/// Where a change a shared store reports was made.
///
/// Threading: a plain value; any thread.
public enum ChangeOrigin: Sendable {
    /// By one of this server's own write paths, whose commit the server has acted on already.
    case thisServer
    /// By another server, plain SQL, or unknown (a reconnect that may have missed changes).
    case elsewhere
}

/// A store several servers share over the network (PostgreSQL). Its reads take a round trip,
/// so no event loop makes them: fetcher threads do, for many requests at once. Writes made
/// anywhere reach this server as invalidations of its cache, which may answer only while the
/// store vouches that every invalidation up to a recent moment has arrived (the lease).
///
/// Threading: thread-safe, as `ProfileStore`.
public protocol SharedProfileStore: ProfileStore {
    /// A reader for one fetcher thread.
    func makeSharedReader() throws -> any SharedProfileReader
    /// Starts following changes made anywhere, on the store's own thread: `invalidate` gets
    /// the ids of changed profiles; `invalidateAll` is called when any cached value may be
    /// stale (a FLUSHALL, or a reconnect that may have missed changes). Each says where the
    /// change came from: this server's own commits come back too, after the server already
    /// acted on them.
    func follow(invalidate: @escaping @Sendable (UnsafeBufferPointer<UnsafeRawBufferPointer>, ChangeOrigin) -> Void,
                invalidateAll: @escaping @Sendable (ChangeOrigin) -> Void) throws
    /// Whether the cache may answer at `now` (monotonic nanoseconds): every change committed
    /// before a moment at most the lease ago has been passed to `invalidate`.
    func cacheMayAnswer(at now: Int) -> Bool
    /// The lease, in nanoseconds: how long a heartbeat that came back vouches for the cache.
    var leaseNanoseconds: Int { get }
    /// Counters for STATS and /metrics.
    var sharedStatistics: SharedStoreStatistics { get }
    /// Stops following; the last call.
    func stopFollowing()
}

/// Reads of a shared store, each a round trip.
///
/// Threading: not thread-safe; one fetcher thread owns each.
public protocol SharedProfileReader: AnyObject {
    /// Looks up every id in one round trip; `found` gets the index of each id that has a
    /// profile, with its row (views valid during the call).
    func lookup(_ userIds: [UnsafeRawBufferPointer], _ found: (Int, ProfileRow) -> Void) throws(StoreError)
    /// The profiles in the table now.
    func count() throws(StoreError) -> Int
    /// As `ProfileReader.recent`.
    func recent(limit: Int, _ each: (ProfileRow) -> Void) throws(StoreError)
    /// As `ProfileReader.scan`.
    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) -> Void) throws(StoreError)
}

/// A shared store's counters.
///
/// A plain value; any thread.
public struct SharedStoreStatistics: Sendable {
    public var invalidationsReceived = 0
    /// Seconds from a change's commit to its invalidation arriving, as histogram buckets
    /// (counts per upper bound in `invalidationLagBounds`, then the count above the last), their
    /// count and sum.
    public var invalidationLagBuckets: [Int] = []
    public var invalidationLagCount = 0
    public var invalidationLagSumSeconds = 0.0
    public var reconnects = 0

    public init() {}

    /// Upper bounds of the invalidation lag buckets, in seconds.
    public static let invalidationLagBounds: [Double] = [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
}

/// A store: hands out the server's write path.
///
/// Threading: thread-safe. Any thread may ask for the write path, which then stays on the
/// thread that uses it.
public protocol ProfileStore: AnyObject, Sendable {
    /// The server's write path: at most one per store with a local log (SQLite); a shared
    /// store gives each of the server's writers one on a connection of its own.
    func openWritePath() throws -> any ProfileWritePath
    /// Why the store cannot be reached now (nil when it can), for /healthz: a store on another
    /// server's network; a store file of this server's own is never unreachable.
    var unreachableReason: String? { get }
    /// What kind of store it is, for /metrics and a node's STATS: `sqlite`, `postgres`.
    var kindName: StaticString { get }
    /// Names the store in logs, e.g. its path.
    var description: String { get }
}

/// A store of this server's own (SQLite in its cache directory): reading it takes no round
/// trip, so each worker reads it itself.
///
/// Threading: thread-safe. Any thread may ask for a reader, which then stays on the thread
/// that uses it.
public protocol LocalProfileStore: ProfileStore {
    func makeReader() throws -> any ProfileReader
}
