import ProfileTestSupport
import Glibc
import ProfileCache
import ProfileClient
@testable import ProfileServer
import ProfileStore

/// The server's own worker, group-commit writer and folder, run in this process on a store the test
/// holds, so the test can inject faults into the store (`SQLiteProfileStore.setFault`) that no
/// flag of the binary reaches. Only the acceptor is the test's: `connect` accepts and hands the
/// socket to the worker the way the server's acceptor does.
///
/// Threading: use it from one thread; the worker, the writer and the folder run on threads of their own.
final class InProcessServer {
    let store: SQLiteProfileStore
    let statistics: ServerStatistics
    private let context: ServerContext
    private let worker: Worker
    private let listener: Int32
    private let port: UInt16
    private var threads: (worker: pthread_t, writer: pthread_t, folder: pthread_t)?

    /// - Parameter wrapFolder: lets a test stand between the server and its folder.
    init(path: String, busyTimeoutMilliseconds: Int32 = 200, pinLimitBytes: Int = 8 << 20,
         wrapFolder: (any WriteLogFolder) -> any WriteLogFolder = { $0 }) throws {
        // The writer warns of every injected fault; the tests check the replies instead.
        Log.level = .error
        store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        nonisolated(unsafe) let storeWriter = try store.makeWriter()
        nonisolated(unsafe) let logWriter = try store.makeWriteLogWriter()
        nonisolated(unsafe) let writerReader = try store.makeReader()
        nonisolated(unsafe) let logFolder = wrapFolder(try store.makeWriteLogFolder())
        let cache = ProfileCache(limitBytes: 8 << 20)
        statistics = ServerStatistics()
        let writer = WriteCoordinator(cache: cache, statistics: statistics, pinLimitBytes: pinLimitBytes,
                                      lastSequence: logWriter.lastSequence)
        context = ServerContext(configuration: ServerConfiguration(), cache: cache, store: store, writer: writer,
                                tokens: TokenRegistry(nil), statistics: statistics, workerCount: 1)
        worker = try Worker(index: 0, context: context, reader: try store.makeReader())
        listener = try listenTCP(host: "127.0.0.1", port: 0)[0]
        port = boundPort(of: listener)
        let worker = self.worker
        threads = (startThread("worker-0") { worker.run() }, startThread("writer") { writer.run(log: logWriter, reader: writerReader) },
                   startThread("folder") { writer.runFolder(folder: logFolder, writer: storeWriter) })
    }

    /// A client connection served by the worker.
    func connect() throws -> ProfileConnection {
        let connection = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 20)
        // The handshake is done once connect returns, so the socket is waiting in the backlog.
        var fd: Int32 = -1
        for _ in 0..<1000 where fd < 0 {
            fd = accept(listener, nil, nil)
            if fd < 0 { usleep(1000) }
        }
        guard fd >= 0 else { throw TestFailure("accept failed: \(String(cString: strerror(errno)))") }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        statistics.currentConnections.add(1, ordering: .relaxed)
        worker.post(.accepted(fd: fd))
        return connection
    }

    /// Stops the worker, then the writer, then the folder, the way the server does on SIGTERM.
    func stop() {
        guard let threads else { return }
        worker.post(.stop)
        pthread_join(threads.worker, nil)
        context.writer.stop()
        pthread_join(threads.writer, nil)
        context.writer.stopFolder()
        pthread_join(threads.folder, nil)
        self.threads = nil
    }

    deinit {
        stop()
        Glibc.close(listener)
    }
}
