import Glibc
import ProfileClient
import ProfileTLS
import Synchronization

/// How the preload (or the warming read) went.
public struct PreloadResult: Sendable {
    public var profiles: Int
    public var seconds: Double
    public var errors: Int
    public var perSecond: Double { seconds > 0 ? Double(profiles) / seconds : 0 }
}

/// Everything a run measured.
///
/// A plain value: any thread may read it.
public struct BenchResult: Sendable {
    public var options: BenchOptions
    public var preload: PreloadResult?
    /// The warming read of the whole key space (`--warm`); `profiles` counts the ids read.
    public var warm: PreloadResult?
    /// The operations of the mix, in its order.
    public var operations: [(operation: Operation, stats: OperationStats)]
    public var total: OperationStats
    /// From the first request sent to the last reply received.
    public var wallSeconds: Double
    /// CPU time profilebench itself used over those seconds (all its threads).
    public var harnessCPUSeconds: Double
    /// Open loop only: requests that fell due but could not be sent (every connection was full).
    public var lateRequests: Int
    /// The first error reply, shown as received.
    public var firstError: String?
    /// Why the run stopped early (refused, closed, garbage), if it did.
    public var failure: String?

    /// No failure and no error reply.
    public var succeeded: Bool {
        failure == nil && total.errors == 0 && (preload?.errors ?? 0) == 0 && (warm?.errors ?? 0) == 0
    }
}

/// Runs a load: connects, optionally preloads, drives the mix, and gathers the results.
///
/// `run` may be called from any thread; it starts and joins its own load threads.
public enum LoadTest {
    /// Preload and warming requests in flight per connection: a few large MSETs keep profiled's
    /// writer busy; memcached has no multi-set and HSET writes one hash, so they get many single
    /// writes instead (and resp many single reads: no command reads several hashes).
    static func preloadPipeline(_ target: TargetProtocol) -> Int { target == .memcached || target == .resp ? 32 : 2 }

    /// - Parameter live: called about once a second with a progress line.
    /// - Throws: `BenchFailure` when a connection cannot be opened or AUTH fails; failures
    ///   during the load end up in the result instead, next to what was measured.
    public static func run(_ options: BenchOptions, live: (@Sendable (String) -> Void)? = nil) throws(BenchFailure) -> BenchResult {
        let space = KeySpace(keys: options.keys, valueSize: options.valueSize)
        let writer = RequestWriter(target: options.target, space: space, token: options.token.map { Array($0.utf8) })
        let endpoint = options.endpointDescription
        let ringSize = max(options.pipeline, preloadPipeline(options.target))
        var connections: [LoadConnection] = []
        let tlsContext: TLSContext?
        do {
            tlsContext = try options.tls?.makeContext()
        } catch {
            throw BenchFailure("\(error)")
        }
        for _ in 0..<options.connections {
            let fd = try openConnection(options)
            var session: TLSSession? = nil
            if let tlsContext {
                do {
                    session = try startTLS(on: fd, to: .tcp(host: options.host, port: options.port ?? options.target.defaultPort),
                                           context: tlsContext, serverName: options.tls?.serverName)
                } catch {
                    close(fd)
                    throw BenchFailure("\(error)")
                }
            }
            let connection = LoadConnection(fd: fd, tls: session, pipeline: options.pipeline, ringSize: ringSize)
            if options.token != nil {
                writer.auth(to: connection.output)
                try blockingRoundTrip(connection, options.target, expecting: .auth, endpoint: endpoint)
            }
            makeNonBlocking(fd)
            connections.append(connection)
        }
        let groups = (0..<options.threads).map { thread in
            stride(from: thread, to: connections.count, by: options.threads).map { connections[$0] }
        }
        let base = WorkerPlan(writer: writer, pipeline: options.pipeline, mix: options.mix, distribution: options.distribution,
                              mgetSize: options.mgetSize, missRatio: options.missRatio, endpoint: endpoint, seed: options.seed)
        var result = BenchResult(options: options, operations: [], total: OperationStats(), wallSeconds: 0,
                                 harnessCPUSeconds: 0, lateRequests: 0)

        if options.preload {
            let pipeline = preloadPipeline(options.target)
            connections.forEach { $0.pipeline = pipeline }
            let plans = (0..<options.threads).map { thread in
                var plan = base
                plan.preload = share(of: options.keys, part: thread, parts: options.threads)
                return plan
            }
            let phase = runPhase(plans, groups, label: "preload", live: live)
            let stats = phase.stats[preloadSlot]
            result.preload = PreloadResult(profiles: stats.keys, seconds: phase.wallSeconds, errors: stats.errors)
            result.firstError = phase.firstError
            if let failure = phase.failure {
                result.failure = "preload: \(failure)"
                return result
            }
            connections.forEach { $0.pipeline = options.pipeline }
        }

        if options.warm {
            let pipeline = preloadPipeline(options.target)
            connections.forEach { $0.pipeline = pipeline }
            let plans = (0..<options.threads).map { thread in
                var plan = base
                plan.preload = share(of: options.keys, part: thread, parts: options.threads)
                plan.warming = true
                return plan
            }
            let phase = runPhase(plans, groups, label: "warm", live: live)
            let stats = phase.stats[warmSlot]
            result.warm = PreloadResult(profiles: stats.keys, seconds: phase.wallSeconds, errors: stats.errors)
            result.firstError = result.firstError ?? phase.firstError
            if let failure = phase.failure {
                result.failure = "warm: \(failure)"
                return result
            }
            connections.forEach { $0.pipeline = options.pipeline }
        }

        let plans = (0..<options.threads).map { thread in
            var plan = base
            plan.seed = options.seed &+ UInt64(thread) &* 0x9E37_79B9
            if let requests = options.requests {
                plan.requestBudget = share(of: requests, part: thread, parts: options.threads).count
            } else {
                plan.durationNanoseconds = UInt64(options.durationSeconds * 1e9)
            }
            if let rate = options.rate {
                plan.interval = max(1, UInt64(1e9 * Double(options.threads) / Double(rate)))
            }
            return plan
        }
        let cpuBefore = processCPUSeconds()
        let phase = runPhase(plans, groups, label: "run", live: live)
        result.harnessCPUSeconds = processCPUSeconds() - cpuBefore
        result.wallSeconds = phase.wallSeconds
        result.operations = options.mix.weights.map { ($0.operation, phase.stats[$0.operation.rawValue]) }
        for entry in result.operations { result.total.merge(entry.stats) }
        result.lateRequests = phase.lateRequests
        result.firstError = result.firstError ?? phase.firstError
        result.failure = phase.failure
        return result
    }

    /// Part `part` of 0..<total cut into `parts` nearly equal ranges.
    static func share(of total: Int, part: Int, parts: Int) -> Range<Int> {
        let size = total / parts
        let extra = total % parts
        let start = part * size + min(part, extra)
        return start..<(start + size + (part < extra ? 1 : 0))
    }

    struct PhaseResult {
        var stats: [OperationStats]
        var wallSeconds: Double
        var lateRequests: Int
        var firstError: String?
        var failure: String?
    }

    /// Runs one worker per plan on its own thread, prints the live line while they run, and
    /// merges what they measured.
    static func runPhase(_ plans: [WorkerPlan], _ groups: [[LoadConnection]], label: String,
                         live: (@Sendable (String) -> Void)?) -> PhaseResult {
        let progress = LiveProgress()
        let workers = zip(plans, groups).map { LoadWorker(plan: $0, connections: $1, progress: progress) }
        progress.running.store(workers.count, ordering: .relaxed)
        var threads: [pthread_t] = []
        for worker in workers {
            var thread = pthread_t()
            let context = Unmanaged.passRetained(worker).toOpaque()
            let rc = pthread_create(&thread, nil, { raw in
                let worker = Unmanaged<LoadWorker>.fromOpaque(raw!).takeRetainedValue()
                worker.run()
                worker.progress.running.subtract(1, ordering: .releasing)
                return nil
            }, context)
            precondition(rc == 0, "pthread_create failed: \(rc)")
            threads.append(thread)
        }
        let start = monotonicNanoseconds()
        var lastTick = start
        var lastReplies = 0
        var seconds = 0
        while progress.running.load(ordering: .acquiring) > 0 {
            usleep(20_000)
            let now = monotonicNanoseconds()
            guard let live, now - lastTick >= 1_000_000_000 else { continue }
            let replies = progress.replies.load(ordering: .relaxed)
            let perSecond = Double(replies - lastReplies) * 1e9 / Double(now - lastTick)
            seconds += 1
            live("[\(label) \(seconds) s] \(grouped(Int(perSecond))) replies/s, \(grouped(progress.errors.load(ordering: .relaxed))) errors")
            lastTick = now
            lastReplies = replies
        }
        for thread in threads { pthread_join(thread, nil) }

        var result = PhaseResult(stats: [OperationStats](repeating: OperationStats(), count: warmSlot + 1),
                                 wallSeconds: 0, lateRequests: 0)
        var first = UInt64.max
        var last: UInt64 = 0
        for worker in workers {
            for slot in 0...warmSlot { result.stats[slot].merge(worker.stats[slot]) }
            first = min(first, worker.startedAt)
            last = max(last, worker.finishedAt)
            result.lateRequests += worker.lateRequests
            result.firstError = result.firstError ?? worker.firstError
            result.failure = result.failure ?? worker.failure
        }
        result.wallSeconds = Double(last - min(first, last)) / 1e9
        return result
    }
}

/// A whole number with thousands separators: 1,234,567.
public func grouped(_ n: Int) -> String {
    let digits = String(n.magnitude)
    var text = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { text.append(",") }
        text.append(c)
    }
    return n < 0 ? "-" + text : text
}
