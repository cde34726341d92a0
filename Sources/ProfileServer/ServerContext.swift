import ProfileCache
import ProfileStore

/// What every worker shares: configuration, cache, store, writer, tokens and counters.
///
/// Immutable after start (its members are themselves thread-safe): any thread may use it.
final class ServerContext: Sendable {
    let configuration: ServerConfiguration
    let cache: ProfileCache
    let store: any ProfileStore
    let writer: WriteCoordinator
    let tokens: TokenRegistry
    let statistics: ServerStatistics
    /// One per worker, in worker order; STATS sums them.
    let workerStatistics: [WorkerStatistics]

    init(configuration: ServerConfiguration, cache: ProfileCache, store: any ProfileStore,
         writer: WriteCoordinator, tokens: TokenRegistry, statistics: ServerStatistics, workerCount: Int) {
        self.configuration = configuration
        self.cache = cache
        self.store = store
        self.writer = writer
        self.tokens = tokens
        self.statistics = statistics
        workerStatistics = (0..<workerCount).map { _ in WorkerStatistics() }
    }
}
