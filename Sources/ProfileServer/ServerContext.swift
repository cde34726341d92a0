import ProfileCache
import ProfileStore
import RESPProtocol
import Synchronization

/// What every worker shares: configuration, cache, store, writer, tokens and counters.
///
/// Immutable after start (its members are themselves thread-safe): any thread may use it.
final class ServerContext: Sendable {
    let configuration: ServerConfiguration
    let cache: ProfileCache
    /// How the cache keeps a profile, for every row the core puts in it.
    let cacheEncoding: any CachedProfileEncoding
    let store: any ProfileStore
    /// The first writer's write path: the store's row count, health and write-path counters,
    /// which are the store's, whichever path reports them.
    let writePath: any ProfileWritePath
    /// One for a store of this server's own; several over a shared store. A connection's
    /// writes all go to one of them (`writer(for:)`), so they commit in the order sent.
    let writers: [WriteCoordinator]
    /// How the store is read where the cache cannot answer, and followed.
    let reads: any StoreReads
    let tokens: TokenRegistry
    let statistics: ServerStatistics
    /// One per worker, in worker order; STATS sums them.
    let workerStatistics: [WorkerStatistics]
    /// One per worker, in worker order; /metrics sums them.
    let latency: [LatencyHistograms]
    /// How busy each worker's loop is, for moving connections between them.
    let loops: LoopLoads
    /// RESP's SCAN cursors, shared: a scan may go on over any connection.
    let scanCursors = ScanCursors()
    /// How RESP keys name profiles (`--resp-key-prefix`).
    let respKeyspace: RESPKeyspace
    /// The port the RESP listener got (INFO's `tcp_port`); set once it is bound.
    let respPortBound = Atomic<Int>(0)
    /// Who read what, for client-side caching (CLIENT TRACKING).
    let tracking: ClientTracking

    init(configuration: ServerConfiguration, cache: ProfileCache, cacheEncoding: any CachedProfileEncoding, store: any ProfileStore,
         writers: [WriteCoordinator], reads: any StoreReads, tracking: ClientTracking, tokens: TokenRegistry,
         statistics: ServerStatistics, workerCount: Int) {
        self.configuration = configuration
        respKeyspace = RESPKeyspace(prefix: configuration.respKeyPrefix)
        self.tracking = tracking
        self.cache = cache
        self.cacheEncoding = cacheEncoding
        self.store = store
        precondition(!writers.isEmpty, "a server has a writer")
        writePath = writers[0].writePath
        self.writers = writers
        self.reads = reads
        self.tokens = tokens
        self.statistics = statistics
        workerStatistics = (0..<workerCount).map { _ in WorkerStatistics() }
        latency = (0..<workerCount).map { _ in LatencyHistograms() }
        loops = LoopLoads(workerCount: workerCount)
    }
}

extension ServerContext {
    var respPort: Int { respPortBound.load(ordering: .relaxed) }

    /// Why the store refuses writes now, as any of the writers' paths found (each writer over a
    /// shared store commits on a connection of its own); nil when it takes them.
    var writeRefusal: WriteRefusal? {
        for writer in writers {
            if let refusal = writer.writePath.writeRefusal { return refusal }
        }
        return nil
    }

    /// The writer that commits this connection's writes: always the same one while it lives.
    func writer(for connection: Connection) -> WriteCoordinator {
        writers.count == 1 ? writers[0] : writers[Int(connection.fd) % writers.count]
    }

    /// Requests answered on either front since the start: INFO's `total_commands_processed`.
    var commandsProcessed: Int {
        latency.reduce(0) { $0 + $1.totalCount }
    }
}

/// STATS at one moment: what the STATS command prints and /metrics exposes, by the same names.
struct StatisticsSnapshot {
    /// `sqlite` or `postgres`: /metrics gives it as a label.
    var storeKind: StaticString
    /// Whether other servers share the store: a node's STATS names its kind.
    var storeIsShared: Bool
    var values: [(name: StaticString, value: Int)]
    /// A shared store's invalidation lag (empty for a store of the server's own).
    var shared: SharedStoreStatistics
}

extension ServerContext {
    /// Sums every worker's published counters with the server-wide ones. Any thread; runs no
    /// SQL and takes no lock the request path holds for long (the cache's statistics lock each
    /// shard briefly, one at a time, and the store's its write buffer).
    func snapshot() -> StatisticsSnapshot {
        var lookups = 0, hits = 0, misses = 0, cacheHits = 0, cacheMisses = 0, errors = 0, leaseExpired = 0
        for worker in workerStatistics {
            leaseExpired += worker.leaseExpiredReads.load(ordering: .relaxed)
            lookups += worker.getLookups.load(ordering: .relaxed)
            hits += worker.getHits.load(ordering: .relaxed)
            misses += worker.getMisses.load(ordering: .relaxed)
            cacheHits += worker.cacheHits.load(ordering: .relaxed)
            cacheMisses += worker.cacheMisses.load(ordering: .relaxed)
            errors += worker.errors.load(ordering: .relaxed)
        }
        let cache = self.cache.statistics
        let writes = writePath.statistics
        let sharedStatistics = reads.sharedStatistics
        return StatisticsSnapshot(storeKind: store.kindName, storeIsShared: reads.isShared, values: [
            ("uptime_seconds", statistics.uptimeSeconds),
            ("curr_connections", statistics.currentConnections.load(ordering: .relaxed)),
            ("total_connections", statistics.totalConnections.load(ordering: .relaxed)),
            ("client_memory_bytes", statistics.clientMemoryBytes.load(ordering: .relaxed)),
            ("client_memory_limit_bytes", configuration.maxClientMemory),
            ("client_evictions", statistics.clientEvictions.load(ordering: .relaxed)),
            ("tls_handshakes", statistics.tlsHandshakes.load(ordering: .relaxed)),
            ("tls_handshake_failures", statistics.tlsHandshakeFailures.load(ordering: .relaxed)),
            ("tls_handshake_timeouts", statistics.tlsHandshakeTimeouts.load(ordering: .relaxed)),
            ("tls_reload_failures", statistics.tlsReloadFailures.load(ordering: .relaxed)),
            ("tls_reload_failed", statistics.tlsReloadFailed.load(ordering: .relaxed)),
            ("cmd_get", lookups),
            ("get_hits", hits),
            ("get_misses", misses),
            ("cache_hits", cacheHits),
            ("cache_misses", cacheMisses),
            ("cache_evictions", cache.evictions),
            ("cache_items", cache.items),
            ("cache_bytes", cache.bytes),
            ("cache_limit_bytes", cache.limitBytes),
            ("cmd_set", statistics.profilesWritten.load(ordering: .relaxed)),
            ("cmd_del", statistics.profilesDeleted.load(ordering: .relaxed)),
            ("store_rows", writePath.rowCount),
            ("errors", errors + statistics.refusedErrors.load(ordering: .relaxed)),
            ("threads", workerStatistics.count),
            ("loop_moves", loops.moves.load(ordering: .relaxed)),
            ("unmerged_writes", writes.unmergedWrites),
            ("write_buffer_bytes", writes.bufferBytes),
            ("write_buffer_limit_bytes", writes.bufferLimitBytes),
            ("write_delays", writes.delayedCommits),
            ("write_delay_ms", writes.delayNanoseconds / 1_000_000),
            ("merges", writes.merges),
            ("merged_rows", writes.mergedRows),
            ("merge_steps_abandoned", writes.abandonedMergeSteps),
            ("write_log_syncs", writes.logSyncs),
            ("invalidations_received", sharedStatistics.invalidationsReceived),
            ("invalidation_lag_count", sharedStatistics.invalidationLagCount),
            ("invalidation_lag_sum_us", Int(sharedStatistics.invalidationLagSumSeconds * 1e6)),
            ("lease_expired_reads", leaseExpired),
            ("postgres_reconnects", sharedStatistics.reconnects),
            ("tracking_clients", tracking.clientCount),
            ("tracking_keys", tracking.keyCount),
            ("tracking_invalidations_sent", tracking.invalidationsSent),
        ], shared: sharedStatistics)
    }
}
