import CLibevent
import CLinux
import Glibc
import ProfileCache
import ProfileStore
import ProfileSystem
import ProfileTLS

/// A server that could not start: one clear sentence for the operator. A plain value; any
/// thread may use it.
public struct StartupError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// profiled: the acceptor, the workers and the writer, from start to clean stop.
///
/// Create and `run` it on the main thread; `run` returns after SIGTERM or SIGINT once every
/// request that arrived is answered, the last writes are committed, merged into the table and
/// the WAL is checkpointed.
public final class Server {
    private let configuration: ServerConfiguration
    private let context: ServerContext
    private var workers: [Worker] = []
    private var listeners: [Listener] = []
    private let base: OpaquePointer
    private var signalEvents: [OpaquePointer?] = []
    private var nextWorker = 0
    /// The next RESP connection's `CLIENT ID`.
    private var nextSessionId = 1
    private var metricsServer: MetricsServer?
    private var resumeTimer: OpaquePointer?
    /// Once a second: gives back to the system what the clients let go of.
    private var trimTimer: OpaquePointer?
    /// Set from an accept that failed for want of descriptors or memory until one succeeds:
    /// such a stretch is logged once, however many pauses it takes.
    private var acceptsExhausted = false
    private var stopping = false
    /// What new TLS connections are made from; SIGHUP replaces it, and connections made from
    /// the one before keep it.
    private var tlsContext: TLSContext?
    static let mallocArenas: Int32 = 1
    /// Where it listens, as logged (`127.0.0.1:7711`, `unix:/run/profiled.sock`).
    public private(set) var addresses: [String] = []

    /// Reads the tokens, opens the store (`openStore`, the executable's choice of store) and
    /// binds the listeners of the fronts it registers, so that every startup problem is
    /// reported before anything is served.
    package init(configuration: ServerConfiguration, fronts: ServerFronts,
                 openStore: () throws -> OpenedStore) throws(StartupError) {
        self.configuration = configuration
        // glibc gives threads arenas of their own as they contend, up to eight per core, and
        // each keeps the peak of what was malloc'd in it. The request path allocates nothing,
        // so one arena costs no measurable speed here (SET, GET and MGET rates unchanged), and
        // it saves 5 to 8 bytes per cached profile: SQLite's working memory for merges, the
        // cache's slab pages and the writer's jobs share it. An operator's MALLOC_ARENA_MAX wins.
        if getenv("MALLOC_ARENA_MAX") == nil { _ = profiled_limit_malloc_arenas(Self.mallocArenas) }
        var tokenTable: TokenTable? = nil
        if let path = configuration.tokensPath {
            do { tokenTable = try TokenTable.load(path: path) } catch { throw StartupError(error.description) }
        }
        if let problem = configuration.insecureBindProblem { throw StartupError(problem) }

        let cache = ProfileCache(limitBytes: configuration.cacheMegabytes * 1_048_576)
        let statistics = ServerStatistics()
        let threads = configuration.threads > 0 ? configuration.threads : max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        let storeLogFields: KeyValuePairs<String, String>
        do {
            let opened = try openStore()
            let changes = ChangeFeeds(fronts.all.compactMap(\.changeFeed))
            let writers = opened.writePaths.map {
                WriteCoordinator(cache: cache, encoding: fronts.cacheEncoding, statistics: statistics, writePath: $0, changes: changes)
            }
            // The one place the server tells a store of its own from a shared one.
            let reads: any StoreReads
            switch opened.readers {
            case .workers(let makeReader):
                do {
                    reads = try WorkersReadTheStore(workers: threads, makeReader: makeReader, writePath: writers[0].writePath)
                } catch {
                    throw StartupError("cannot open a store reader: \(error)")
                }
            case .fetchers(let store, let readers):
                reads = FetchersReadTheStore(store: store, readers: readers)
            }
            context = ServerContext(configuration: configuration, cache: cache, cacheEncoding: fronts.cacheEncoding, store: opened.store,
                                    writers: writers, reads: reads, fronts: fronts.all, changes: changes,
                                    tokens: TokenRegistry(tokenTable),
                                    statistics: statistics, workerCount: threads)
            storeLogFields = opened.logFields
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError("\(error)")
        }

        let config = event_config_new()
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_NOLOCK.rawValue))
        base = event_base_new_with_config(config)
        event_config_free(config)

        do {
            for i in 0..<threads { workers.append(try Worker(index: i, context: context)) }
            for worker in workers { worker.peers = workers.map { PeerWorker(worker: $0) } }
            let line = ServerFronts.lineIndex, resp = ServerFronts.respIndex
            let tcp: [(port: UInt16?, front: Int, tls: Bool)] = [
                (configuration.port, line, false), (configuration.respPort, resp, false),
                (configuration.tlsPort, line, true), (configuration.respTLSPort, resp, true),
            ]
            for (port, front, tls) in tcp {
                guard let port else { continue }
                for fd in try listenTCP(host: configuration.host, port: port) {
                    listeners.append(Listener(fd: fd, front: fronts.all[front], index: front, tls: tls, address: boundAddress(of: fd)))
                    fronts.all[front].bound(port: Int(boundPort(of: fd)), tls: tls)
                }
            }
            if let unixPath = configuration.unixPath {
                listeners.append(Listener(fd: try listenUnix(path: unixPath), front: fronts.line, index: line, tls: false,
                                          address: "unix:\(unixPath)"))
            }
        } catch {
            for listener in listeners { Glibc.close(listener.fd) }
            throw StartupError("cannot listen: \(error)")
        }
        if let tls = configuration.tls {
            do {
                tlsContext = try TLSContext(server: tls)
            } catch {
                for listener in listeners { Glibc.close(listener.fd) }
                throw StartupError("cannot use the TLS settings: \(error)")
            }
        }
        addresses = listeners.map(\.address)
        if let metrics = configuration.metricsAddress {
            do {
                metricsServer = try MetricsServer(base: base, host: metrics.host, port: metrics.port, context: context)
            } catch {
                for listener in listeners { Glibc.close(listener.fd) }
                throw error
            }
        }
        raiseFileLimit(toFit: configuration.maxConnections)
        Log.info("store opened", storeLogFields)
        Log.info("cache ready", ["limit_mb": "\(configuration.cacheMegabytes)", "threads": "\(threads)"])
    }

    deinit {
        metricsServer = nil
        if let resumeTimer { event_free(resumeTimer) }
        if let trimTimer { event_free(trimTimer) }
        for event in signalEvents { if let event { event_free(event) } }
        for listener in listeners {
            if let event = listener.event { event_free(event) }
        }
        event_base_free(base)
    }

    /// Serves until SIGTERM or SIGINT, then stops cleanly. Returns whether every acknowledged
    /// write was merged into the store's table; those that were not stay in the write log,
    /// which the next start merges.
    @discardableResult
    public func run() -> Bool {
        signal(SIGPIPE, SIG_IGN)
        // A parent may have started us with these blocked; the threads below inherit the mask.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGTERM)
        sigaddset(&stopSignals, SIGINT)
        sigaddset(&stopSignals, SIGHUP)
        pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
        let context = self.context
        let writerThreads = context.writers.enumerated().map { index, writer in
            startThread(context.writers.count == 1 ? "writer" : "writer-\(index)") { writer.run() }
        }
        context.reads.start(cache: context.cache, changes: context.changes)
        var workerThreads: [pthread_t] = []
        for worker in workers {
            workerThreads.append(startThread("worker-\(worker.index)") { worker.run() })
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        trimTimer = event_new(base, -1, Int16(EV_PERSIST), serverTrimTick, me)
        var second = timeval(tv_sec: 1, tv_usec: 0)
        event_add(trimTimer, &second)
        metricsServer?.exhausted = { [unowned self] error in self.pauseAccepting(error) }
        metricsServer?.accepted = { [unowned self] in self.acceptsExhausted = false }
        if configuration.metricsTLS { metricsServer?.tlsContext = { [unowned self] in self.tlsContext } }
        for listener in listeners {
            listener.event = event_new(base, listener.fd, Int16(EV_READ | EV_PERSIST), serverAcceptReady,
                                       Unmanaged.passUnretained(listener).toOpaque())
            listener.server = self
            event_add(listener.event, nil)
        }
        for signalNumber in [SIGTERM, SIGINT] {
            let event = event_new(base, signalNumber, Int16(EV_SIGNAL | EV_PERSIST), serverSignalled, me)
            event_add(event, nil)
            signalEvents.append(event)
        }
        let hangup = event_new(base, SIGHUP, Int16(EV_SIGNAL | EV_PERSIST), serverHangup, me)
        event_add(hangup, nil)
        signalEvents.append(hangup)
        // "listening" comes last: whoever waits for it (a supervisor, the tests) finds
        // everything else ready and logged.
        if let metricsServer {
            Log.info("serving metrics", ["addr": metricsServer.address, "paths": "/metrics,/healthz",
                                         "scheme": configuration.metricsTLS ? "https" : "http"])
        }
        for listener in listeners {
            Log.info("listening", listener.front.logFields + (listener.tls ? [("tls", "yes")] : []) + [("addr", listener.address)])
        }

        event_base_dispatch(base)

        Log.info("stopping: answering what arrived, then committing")
        for worker in workers { worker.post(.stop) }
        for thread in workerThreads { pthread_join(thread, nil) }
        context.reads.stopReading()
        for writer in context.writers { writer.stop() }
        for thread in writerThreads { pthread_join(thread, nil) }
        context.reads.stopFollowing()
        // Then what is left of the write log goes into the table, and the WAL into the file.
        var merged = true
        for writer in context.writers {
            do {
                try writer.writePath.close()
            } catch {
                merged = false
                Log.warn("merging the write log at shutdown failed; the next start merges it", ["error": "\(error)"])
            }
        }
        workers.removeAll()
        Log.info("stopped")
        return merged
    }

    fileprivate func acceptReady(_ listener: Listener) {
        // A bounded number per wake-up, so a connect storm cannot starve signal handling.
        for _ in 0..<256 {
            let fd: Int32
            switch acceptConnection(listener.fd) {
            case .connection(let accepted): fd = accepted
            case .drained: return
            case .exhausted(let error): return pauseAccepting(error)
            case .failed(let error): return Log.warn("accept failed", ["error": String(cString: strerror(error))])
            }
            acceptsExhausted = false
            let statistics = context.statistics
            if statistics.currentConnections.load(ordering: .relaxed) >= configuration.maxConnections {
                // Over TLS nothing can be said before a handshake: the connection is only
                // closed, as Redis does.
                if !listener.tls {
                    writeBestEffort(fd, listener.busyReply)
                }
                statistics.refusedErrors.add(1, ordering: .relaxed)
                Glibc.close(fd)
                continue
            }
            let transport: Transport
            if listener.tls {
                guard let session = tlsContext?.session(fd: fd, accepting: true) else {
                    Log.warn("cannot start a TLS session; connection closed")
                    Glibc.close(fd)
                    continue
                }
                transport = .tls(TLSTransport(fd: fd, session: session))
            } else {
                transport = .plain(PlainTransport(fd: fd))
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            statistics.currentConnections.add(1, ordering: .relaxed)
            statistics.totalConnections.add(1, ordering: .relaxed)
            if Log.level <= .debug { Log.debug("connection accepted", ["fd": "\(fd)", "worker": "\(nextWorker)"]) }
            workers[nextWorker].post(.accepted(transport: transport, frontIndex: listener.frontIndex, sessionId: nextSessionId))
            nextSessionId += 1
            nextWorker = (nextWorker + 1) % workers.count
        }
    }

    /// Accept failed for want of descriptors or memory: the pending connection stays readable,
    /// so every listener (the metrics one too) pauses for 100 ms instead of spinning.
    private func pauseAccepting(_ error: Int32) {
        if !acceptsExhausted {
            acceptsExhausted = true
            Log.warn("accept failed; pausing accepts 100 ms at a time until one succeeds",
                     ["error": String(cString: strerror(error))])
        }
        for listener in listeners { if let event = listener.event { event_del(event) } }
        metricsServer?.pause()
        if resumeTimer == nil {
            resumeTimer = event_new(base, -1, 0, serverResumeAccepting, Unmanaged.passUnretained(self).toOpaque())
        }
        var delay = timeval(tv_sec: 0, tv_usec: 100_000)
        event_add(resumeTimer, &delay)
    }

    fileprivate func resumeAccepting() {
        guard !stopping else { return }
        for listener in listeners { if let event = listener.event { event_add(event, nil) } }
        metricsServer?.resume()
    }

    /// The clients' memory fell by this much from its peak: time to give it back.
    static let trimThreshold = 4 << 20

    /// Gives memory the clients let go of back to the system. glibc keeps freed memory in its
    /// heap for reuse, so after the clients held much (a burst of large replies, an attack
    /// cut short by `--max-client-memory`) the resident size would stay at its peak.
    fileprivate func returnFreedClientMemory() {
        let statistics = context.statistics
        let now = statistics.clientMemoryBytes.load(ordering: .relaxed)
        guard statistics.clientMemoryPeak.load(ordering: .relaxed) - now >= Self.trimThreshold else { return }
        statistics.clientMemoryPeak.store(now, ordering: .relaxed)
        malloc_trim(0)
    }

    /// SIGHUP: read the tokens file again. Connections keep the role they have; a file that
    /// cannot be used is reported and the tokens in force stay.
    fileprivate func hangUp() {
        reloadTokens()
        reloadTLS()
    }

    /// SIGHUP: read the certificate, key and CA files again. New connections use them; open
    /// ones keep what they were made with. Files that cannot be used are reported and the
    /// ones in force stay.
    private func reloadTLS() {
        guard let settings = configuration.tls else { return }
        do {
            tlsContext = try TLSContext(server: settings)
            context.statistics.tlsReloadFailed.store(0, ordering: .relaxed)
            Log.info("TLS certificates reloaded", ["cert": settings.certificateFile])
        } catch {
            context.statistics.tlsReloadFailures.add(1, ordering: .relaxed)
            context.statistics.tlsReloadFailed.store(1, ordering: .relaxed)
            Log.error("TLS certificates not reloaded; the previous ones stay in force", ["error": error.description])
        }
    }

    private func reloadTokens() {
        guard let path = configuration.tokensPath else {
            Log.info("SIGHUP: no tokens file to reload")
            return
        }
        do {
            let table = try TokenTable.load(path: path)
            context.tokens.replace(with: table)
            Log.info("tokens reloaded", ["path": path, "tokens": "\(table.count)"])
        } catch {
            Log.error("tokens not reloaded; the previous ones stay in force", ["error": error.description])
        }
    }

    fileprivate func signalled(_ number: Int32) {
        Log.info("signal received", ["signal": number == SIGTERM ? "TERM" : "INT"])
        guard !stopping else { return }
        stopping = true
        for listener in listeners {
            if let event = listener.event { event_del(event) }
            Glibc.close(listener.fd)
        }
        if let unixPath = configuration.unixPath { unlink(unixPath) }
        event_base_loopbreak(base)
    }
}

/// Raises the soft limit on open files toward what `--max-connections` needs (plus room for
/// the store, listeners and event loops), as far as the hard limit allows; says so when it
/// cannot reach it, since accept would then fail before ERROR BUSY could be sent.
private func raiseFileLimit(toFit connections: Int) {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
    let wanted = rlim_t(connections + 256)
    guard limit.rlim_cur < wanted else { return }
    limit.rlim_cur = min(wanted, limit.rlim_max)
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    if limit.rlim_cur < wanted {
        Log.warn("open file limit is below what --max-connections needs", ["limit": "\(limit.rlim_cur)", "wanted": "\(wanted)"])
    }
}

private func serverAcceptReady(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let listener = Unmanaged<Listener>.fromOpaque(context!).takeUnretainedValue()
    listener.server?.acceptReady(listener)
}

/// A listening socket, the front its connections speak, and its accept event.
///
/// Used on the main thread only.
private final class Listener {
    let fd: Int32
    let front: any Front
    /// The front's index in `ServerFronts.all`.
    let frontIndex: Int
    /// What a connection past `--max-connections` gets before it is closed (`Front.busyReply`).
    let busyReply: [UInt8]
    /// Whether its connections start with a TLS handshake.
    let tls: Bool
    /// As logged: `127.0.0.1:7711`, `unix:/run/profiled.sock`.
    let address: String
    var event: OpaquePointer?
    weak var server: Server?

    init(fd: Int32, front: any Front, index: Int, tls: Bool, address: String) {
        self.fd = fd
        self.front = front
        frontIndex = index
        busyReply = front.busyReply
        self.tls = tls
        self.address = address
    }
}

private func serverResumeAccepting(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Server>.fromOpaque(context!).takeUnretainedValue().resumeAccepting()
}

private func serverTrimTick(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Server>.fromOpaque(context!).takeUnretainedValue().returnFreedClientMemory()
}

private func serverHangup(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Server>.fromOpaque(context!).takeUnretainedValue().hangUp()
}

private func serverSignalled(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Server>.fromOpaque(context!).takeUnretainedValue().signalled(fd)
}
