import Glibc
import ProfileServer
import ProfileStore
import ProfileStorePostgres
import ProfileStoreSQLite

/// Where the profiles live, as the flags and the config file chose: a store file of this
/// server's (SQLite), or a PostgreSQL database that several servers share. The executable
/// opens it; the server sees only its interface.
///
/// A plain value; the main thread.
struct StoreOptions {
    /// The store file; nil means the default location (see `SQLiteProfileStore.defaultPath`).
    var databasePath: String? = nil
    /// A libpq connection string: the store is then a PostgreSQL database that other servers
    /// share (docs/CLUSTER.md), instead of the SQLite file.
    var postgres: String? = nil
    /// How long the cache may answer after the newest heartbeat that came back through
    /// PostgreSQL was sent: the most another server's write can take to be seen here.
    var leaseMilliseconds = 1000
    /// Memory for writes committed and not yet merged into the store's table, in MiB.
    var writeBufferMegabytes = 256
    var synchronous = SynchronousMode.normal
    var busyTimeoutMilliseconds: Int32 = 5000
    /// SQLite page cache of the writer: SQLite's own default. Group commits are small and pages
    /// they miss come from the OS's cache; memory is better spent on the profile cache. With
    /// 256 MiB it stayed resident and cost 170 bytes per cached profile at a million of them,
    /// for no measurable gain in writes. (The store's larger default suits offline imports.)
    var writerCacheMebibytes: Int { 2 }
    /// Threads that make the shared store's reads, each on a connection of its own.
    var fetcherThreads: Int { 4 }
    /// Writer threads over the shared store, each with its group commits on a connection of
    /// its own: one PostgreSQL backend runs one commit at a time, so several keep more of
    /// them going at once.
    var sharedWriterThreads: Int { 4 }

    /// Opens the chosen store for the server.
    func open() throws -> OpenedStore {
        let warn: @Sendable (String, String) -> Void = { message, error in Log.warn(message, ["error": error]) }
        if let conninfo = postgres {
            let store = try PostgresProfileStore(conninfo: conninfo, leaseMilliseconds: leaseMilliseconds, warn: warn)
            return OpenedStore(store: store,
                               writePaths: try (0..<sharedWriterThreads).map { _ in try store.openWritePath() },
                               readers: .fetchers(store, try (0..<fetcherThreads).map { _ in try store.makeSharedReader() }),
                               logFields: ["postgres": store.description, "lease_ms": "\(leaseMilliseconds)"])
        }
        let path = databasePath ?? SQLiteProfileStore.defaultPath { getenv($0).map { String(cString: $0) } }
        let store = try SQLiteProfileStore(path: path, synchronous: synchronous, busyTimeoutMilliseconds: busyTimeoutMilliseconds,
                                           writerCacheMebibytes: writerCacheMebibytes,
                                           writeBufferBytes: writeBufferMegabytes * 1_048_576)
        return OpenedStore(store: store, writePaths: [try store.openWritePath(warn: warn)],
                           readers: .workers { try store.makeReader() },
                           logFields: ["path": path, "sync": synchronous == .full ? "full" : "normal",
                                       "write_buffer_mb": "\(writeBufferMegabytes)"])
    }
}
