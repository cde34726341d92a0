import Glibc
import LineFront
import ProfileCache
import ProfileClient
@testable import ProfileServer
import RESPFront
import ProfileStore
import ProfileStoreSQLite
import ProfileSystem
import ProfileTestSupport

/// The server's own workers and group-commit writer, run in this process on a store the test
/// holds, so the test can inject faults into the store (`SQLiteProfileStore.setFault`) that no
/// flag of the binary reaches. Only the acceptor is the test's: `connect` accepts and hands the
/// socket to a worker the way the server's acceptor does.
///
/// Threading: use it from one thread; the workers, the writer and the store's merger run on
/// threads of their own.
final class InProcessServer {
    let store: SQLiteProfileStore
    let statistics: ServerStatistics
    private let context: ServerContext
    private let workers: [Worker]
    private let listener: Int32
    private let port: UInt16
    private var nextWorker = 0
    private var threads: (workers: [pthread_t], writer: pthread_t)?

    /// - Parameters:
    ///   - workers: event loops, each with its own thread; `loopPolicy` moves connections between them.
    ///   - writeBufferBytes: the store's memory for writes not yet merged.
    ///   - wrapReader: lets a test stand between each worker and its reader of the store.
    ///   - wrapWritePath: lets a test stand between the writer and the store's write path.
    ///   - respKeyPrefix: `--resp-key-prefix`.
    init(path: String, busyTimeoutMilliseconds: Int32 = 200, writeBufferBytes: Int = 8 << 20,
         workers workerCount: Int = 1, loopPolicy: LoopPolicy = .standard, respKeyPrefix: String = "",
         wrapReader: (any ProfileReader) -> any ProfileReader = { $0 },
         wrapWritePath: (any ProfileWritePath) -> any ProfileWritePath = { $0 }) throws {
        // The writer warns of every injected fault; the tests check the replies instead.
        Log.level = .error
        store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds,
                                       writeBufferBytes: writeBufferBytes)
        let writePath = wrapWritePath(try store.openWritePath())
        let cache = ProfileCache(limitBytes: 8 << 20)
        statistics = ServerStatistics()
        var configuration = ServerConfiguration()
        configuration.loopPolicy = loopPolicy
        configuration.respKeyPrefix = Array(respKeyPrefix.utf8)
        // Registered as the executable registers them.
        let fronts = ServerFronts(line: LineProtocolFront(maxLine: configuration.maxLine),
                                  resp: RESPProtocolFront(keyPrefix: configuration.respKeyPrefix,
                                                          trackingTableMaxKeys: configuration.trackingTableMaxKeys),
                                  cacheEncoding: LineCacheEncoding())
        let changes = ChangeFeeds(fronts.all.compactMap { $0.changeFeed })
        let writer = WriteCoordinator(cache: cache, encoding: fronts.cacheEncoding, statistics: statistics, writePath: writePath,
                                      changes: changes)
        let store = self.store
        let reads = try WorkersReadTheStore(workers: workerCount, makeReader: { wrapReader(try store.makeReader()) },
                                            writePath: writePath)
        context = ServerContext(configuration: configuration, cache: cache, cacheEncoding: fronts.cacheEncoding, store: store,
                                writers: [writer], reads: reads, fronts: fronts.all, changes: changes,
                                tokens: TokenRegistry(nil), statistics: statistics,
                                workerCount: workerCount)
        var workers: [Worker] = []
        for i in 0..<workerCount {
            workers.append(try Worker(index: i, context: context))
        }
        for worker in workers { worker.peers = workers.map { PeerWorker(worker: $0) } }
        self.workers = workers
        listener = try listenTCP(host: "127.0.0.1", port: 0)[0]
        port = boundPort(of: listener)
        threads = (workers.map { worker in startThread("worker-\(worker.index)") { worker.run() } },
                   startThread("writer") { writer.run() })
    }

    /// A STATS value as the server has it now.
    func statistic(_ name: String) -> Int? {
        context.snapshot().values.first { $0.name.description == name }?.value
    }

    /// What the workers published about their loops at their last ticks.
    var loops: LoopLoads { context.loops }

    /// A client connection served by the workers, handed to them in turn.
    func connect() throws -> ProfileConnection {
        let connection = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 20)
        try hand(ServerFronts.lineIndex)
        return connection
    }

    /// A RESP connection, handed to the workers as the RESP listener's are.
    func connectRESP() throws -> RESPTestClient {
        let client = try RESPTestClient(port: port)
        try hand(ServerFronts.respIndex)
        return client
    }

    /// Accepts the connection just made and hands it to the next worker.
    private func hand(_ frontIndex: Int) throws {
        // The handshake is done once connect returns, so the socket is waiting in the backlog.
        var fd: Int32 = -1
        for _ in 0..<1000 where fd < 0 {
            fd = accept(listener, nil, nil)
            if fd < 0 { usleep(1000) }
        }
        guard fd >= 0 else { throw TestFailure("accept failed: \(String(cString: strerror(errno)))") }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        statistics.currentConnections.add(1, ordering: .relaxed)
        workers[nextWorker].post(.accepted(transport: .plain(PlainTransport(fd: fd)), frontIndex: frontIndex, sessionId: nextWorker + 1))
        nextWorker = (nextWorker + 1) % workers.count
    }

    /// Stops the workers, then the writer, then closes the write path, the way the server
    /// does on SIGTERM.
    func stop() {
        guard let threads else { return }
        for worker in workers { worker.post(.stop) }
        for thread in threads.workers { pthread_join(thread, nil) }
        context.writers[0].stop()
        pthread_join(threads.writer, nil)
        try? context.writePath.close()
        self.threads = nil
    }

    deinit {
        stop()
        Glibc.close(listener)
    }
}
