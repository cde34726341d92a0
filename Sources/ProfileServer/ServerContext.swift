import ProfileCache
import ProfileStore
import Synchronization

/// What every worker shares: configuration, cache, store, writer, tokens and counters.
///
/// Immutable after start (its members are themselves thread-safe): any thread may use it.
package final class ServerContext: Sendable {
    package let configuration: ServerConfiguration
    package let cache: ProfileCache
    /// How the cache keeps a profile, for every row the core puts in it.
    package let cacheEncoding: any CachedProfileEncoding
    package let store: any ProfileStore
    /// The first writer's write path: the store's row count, health and write-path counters,
    /// which are the store's, whichever path reports them.
    package let writePath: any ProfileWritePath
    /// One for a store of this server's own; several over a shared store. A connection's
    /// writes all go to one of them (`writer(for:)`), so they commit in the order sent.
    let writers: [WriteCoordinator]
    /// How the store is read where the cache cannot answer, and followed.
    package let reads: any StoreReads
    package let tokens: TokenRegistry
    package let statistics: ServerStatistics
    /// One per worker, in worker order; STATS sums them.
    package let workerStatistics: [WorkerStatistics]
    /// One per worker, in worker order; /metrics sums them.
    let latency: [LatencyHistograms]
    /// How busy each worker's loop is, for moving connections between them.
    let loops: LoopLoads
    /// The fronts the executable registered, by front index (`Connection.frontIndex`).
    package let fronts: [any Front]
    /// Who hears of every change: the fronts' change feeds.
    package let changes: any ChangeFeed

    init(configuration: ServerConfiguration, cache: ProfileCache, cacheEncoding: any CachedProfileEncoding, store: any ProfileStore,
         writers: [WriteCoordinator], reads: any StoreReads, fronts: [any Front], changes: any ChangeFeed, tokens: TokenRegistry,
         statistics: ServerStatistics, workerCount: Int) {
        self.configuration = configuration
        self.fronts = fronts
        self.changes = changes
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
    /// Why the store refuses writes now, as any of the writers' paths found (each writer over a
    /// shared store commits on a connection of its own); nil when it takes them.
    package var writeRefusal: WriteRefusal? {
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
    package var commandsProcessed: Int {
        latency.reduce(0) { $0 + $1.totalCount }
    }
}

/// STATS at one moment: what the STATS command prints and /metrics exposes, by the same names.
package struct StatisticsSnapshot {
    /// `sqlite` or `postgres`: /metrics gives it as a label.
    package var storeKind: StaticString
    /// Whether other servers share the store: a node's STATS names its kind.
    package var storeIsShared: Bool
    package var values: [(name: StaticString, value: Int)]
    /// A shared store's invalidation lag (empty for a store of the server's own).
    package var shared: SharedStoreStatistics
}

extension ServerContext {
    /// Sums every worker's published counters with the server-wide ones. Any thread; runs no
    /// SQL and takes no lock the request path holds for long (the cache's statistics lock each
    /// shard briefly, one at a time, and the store's its write buffer).
    package func snapshot() -> StatisticsSnapshot {
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
        let changeStatistics = changes.statistics
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
            ("cache_small_bytes", cache.smallBytes),
            ("cache_promotions", cache.promotions),
            ("cache_ghost_hits", cache.ghostHits),
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
            ("tracking_clients", changeStatistics.clients),
            ("tracking_keys", changeStatistics.keys),
            ("tracking_invalidations_sent", changeStatistics.invalidationsSent),
        ], shared: sharedStatistics)
    }
}
