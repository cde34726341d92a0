import Glibc
import Synchronization

/// Counters a load thread publishes while it runs, for the live line, and the flag that
/// stops every thread once one has failed.
///
/// Shared by all threads of a run; every member is atomic.
final class LiveProgress: Sendable {
    let replies = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    let stop = Atomic<Bool>(false)
    let running = Atomic<Int>(0)
}

/// ppoll(2): poll with a nanosecond timeout, so the open loop sends each request when it is
/// due rather than up to a millisecond late. The toolchain's Glibc module leaves it out (it is
/// declared only under _GNU_SOURCE), so it is looked up in the C library at run time.
let preciseWait: @convention(c) (UnsafeMutablePointer<pollfd>?, nfds_t, UnsafePointer<timespec>?, UnsafeRawPointer?) -> Int32 = {
    guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "ppoll") else { fatalError("the C library has no ppoll") }
    return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<pollfd>?, nfds_t, UnsafePointer<timespec>?, UnsafeRawPointer?) -> Int32).self)
}()

/// What one load thread does in one phase of a run.
struct WorkerPlan: Sendable {
    var writer: RequestWriter
    var pipeline: Int
    var mix: OperationMix
    var distribution: KeyDistribution
    var mgetSize: Int
    var missRatio: Double
    var endpoint: String
    /// Set for the preload: write exactly these ids, in batches, and nothing else; or, with
    /// `warming`, read them once in multi-lookups.
    var preload: Range<Int>?
    var warming = false
    /// Stop issuing after this many requests.
    var requestBudget: Int?
    var durationNanoseconds: UInt64?
    /// Open loop: nanoseconds between this thread's scheduled requests.
    var interval: UInt64?
    var seed: UInt64
}

/// One load thread's loop: its own connections, non-blocking sockets and poll(2) (the toolchain's
/// Glibc module has no epoll; with a few dozen sockets per thread the scan costs little next to
/// the replies each wake-up brings); requests are
/// written straight into each connection's output bytes and replies parsed where they land.
///
/// Closed loop: each connection keeps `pipeline` requests in flight and latency runs from
/// the send. Open loop: requests are due at fixed intervals, go to any connection with room,
/// and latency runs from when each was due, so a slow server cannot hide its stalls.
///
/// Used by one thread at a time: the thread that runs it, then (after joining it) the one
/// that reads its results.
///
/// Its mutable fields are `@exclusivity(unchecked)`: only the owning thread touches them, and
/// the runtime's dynamic exclusivity checks were a third of the load loop's instructions.
final class LoadWorker: @unchecked Sendable {
    let plan: WorkerPlan
    let connections: [LoadConnection]
    let progress: LiveProgress
    @exclusivity(unchecked) private(set) var stats = [OperationStats](repeating: OperationStats(), count: warmSlot + 1)
    @exclusivity(unchecked) private(set) var failure: String?
    @exclusivity(unchecked) private(set) var firstError: String?
    /// Open loop: requests that were due but never sent because every connection was full.
    @exclusivity(unchecked) private(set) var lateRequests = 0
    @exclusivity(unchecked) private(set) var startedAt: UInt64 = 0
    @exclusivity(unchecked) private(set) var finishedAt: UInt64 = 0

    @exclusivity(unchecked) private var random: RandomSource
    private let zipf: ZipfSampler?
    @exclusivity(unchecked) private var issued = 0
    @exclusivity(unchecked) private var outstanding = 0
    @exclusivity(unchecked) private var stopping = false
    @exclusivity(unchecked) private var nextPreload = 0
    @exclusivity(unchecked) private var pollSet: [pollfd]
    @exclusivity(unchecked) private var publishedReplies = 0
    @exclusivity(unchecked) private var publishedErrors = 0
    @exclusivity(unchecked) private var roundRobin = 0

    init(plan: WorkerPlan, connections: [LoadConnection], progress: LiveProgress) {
        self.plan = plan
        self.connections = connections
        self.progress = progress
        random = RandomSource(seed: plan.seed)
        if case .zipf(let s) = plan.distribution {
            zipf = ZipfSampler(count: plan.writer.space.keys, exponent: s)
        } else {
            zipf = nil
        }
        nextPreload = plan.preload?.lowerBound ?? 0
        pollSet = connections.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
    }

    func run() {
        var now = monotonicNanoseconds()
        startedAt = now
        let deadline = plan.durationNanoseconds.map { now + $0 }
        var nextDue = now
        var drainDeadline: UInt64 = 0
        if plan.interval == nil {
            for index in connections.indices {
                fill(connections[index], now)
                flush(index)
            }
        }
        while failure == nil {
            if let interval = plan.interval, !stopping {
                while nextDue <= now && nextDue < (deadline ?? .max) && canIssue, let connection = connectionWithRoom() {
                    issue(on: connection, start: nextDue)
                    nextDue += interval
                }
                for index in connections.indices where !connections[index].output.isEmpty { flush(index) }
            }
            if !stopping && (progress.stop.load(ordering: .relaxed) || !canIssue || deadline.map { now >= $0 } == true) {
                stopping = true
                drainDeadline = now + 10_000_000_000
                if let interval = plan.interval, let deadline, nextDue < deadline, canIssue {
                    lateRequests = Int((deadline - nextDue + interval - 1) / interval)
                }
            }
            if stopping && outstanding == 0 { break }
            if stopping && now >= drainDeadline {
                failure = "\(plan.endpoint) left \(outstanding) requests unanswered for 10 s after the run ended"
                break
            }
            // Wake for the next scheduled request exactly (open loop), else at least every
            // 100 ms to notice the end of the run.
            var wait: UInt64 = 100_000_000
            if plan.interval != nil && !stopping && nextDue > now {
                wait = min(wait, nextDue - now)
            } else if let deadline, !stopping {
                wait = min(wait, deadline - min(now, deadline))
            }
            var timeout = timespec(tv_sec: Int(wait / 1_000_000_000), tv_nsec: Int(wait % 1_000_000_000))
            let ready = pollSet.withUnsafeMutableBufferPointer { preciseWait($0.baseAddress, nfds_t($0.count), &timeout, nil) }
            now = monotonicNanoseconds()
            if ready < 0 && errno != EINTR {
                failure = "ppoll failed: \(errnoText())"
                break
            }
            var left = Int(ready)
            var index = 0
            while left > 0 && index < pollSet.count && failure == nil {
                let revents = Int32(pollSet[index].revents)
                if revents != 0 {
                    left -= 1
                    if revents & Int32(POLLIN | POLLERR | POLLHUP) != 0 { receive(index, now) }
                    if failure == nil && revents & Int32(POLLOUT) != 0 { flush(index) }
                }
                index += 1
            }
            publish()
        }
        finishedAt = now
        publish()
        if failure != nil { progress.stop.store(true, ordering: .relaxed) }
    }

    private var canIssue: Bool {
        if let range = plan.preload { return nextPreload < range.upperBound }
        if let budget = plan.requestBudget { return issued < budget }
        return true
    }

    private func connectionWithRoom() -> LoadConnection? {
        for _ in 0..<connections.count {
            let connection = connections[roundRobin]
            roundRobin = roundRobin + 1 == connections.count ? 0 : roundRobin + 1
            if connection.hasRoom { return connection }
        }
        return nil
    }

    private func fill(_ connection: LoadConnection, _ now: UInt64) {
        while connection.hasRoom && canIssue && !stopping {
            issue(on: connection, start: now)
        }
    }

    @inline(__always)
    private func nextKey() -> Int {
        if let zipf { return zipf.next(using: &random) - 1 }
        return random.below(plan.writer.space.keys)
    }

    @inline(__always)
    private func drawMissing() -> Bool {
        plan.missRatio > 0 && random.unit() < plan.missRatio
    }

    private func issue(on connection: LoadConnection, start: UInt64) {
        let out = connection.output
        let writer = plan.writer
        let slot: Int
        var keys = 1
        if let range = plan.preload, plan.warming {
            let end = min(range.upperBound, nextPreload + writer.warmBatch)
            writer.warmingRead(nextPreload..<end, to: out)
            keys = end - nextPreload
            nextPreload = end
            slot = warmSlot
        } else if let range = plan.preload {
            let end = min(range.upperBound, nextPreload + writer.preloadBatch)
            writer.batchSet(nextPreload..<end, to: out)
            keys = end - nextPreload
            nextPreload = end
            slot = preloadSlot
        } else {
            let operation = plan.mix.pick(&random)
            slot = operation.rawValue
            switch operation {
            case .get: writer.lookup(nextKey(), missing: drawMissing(), to: out)
            case .mget:
                keys = plan.mgetSize
                writer.beginMultiLookup(count: keys, to: out)
                for _ in 0..<keys { writer.multiLookupKey(nextKey(), missing: drawMissing(), to: out) }
                writer.endMultiLookup(to: out)
            case .set: writer.set(nextKey(), to: out)
            case .update: writer.update(nextKey(), missing: false, to: out)
            case .del: writer.delete(nextKey(), missing: false, to: out)
            case .exists: writer.exists(nextKey(), missing: drawMissing(), to: out)
            case .hmget: writer.lookupFields(nextKey(), missing: drawMissing(), to: out)
            case .count, .stats, .recent, .scan: writer.operatorRequest(operation, from: nextKey(), to: out)
            }
        }
        connection.push(slot: slot, keys: keys, start: start)
        outstanding += 1
        issued += 1
    }

    private func receive(_ index: Int, _ now: UInt64) {
        let connection = connections[index]
        let input = connection.input
        let space = input.reserve(1 << 16)
        let n = connection.receive(into: space, count: input.spaceAtEnd)
        if n > 0 {
            input.commit(n)
            parseReplies(connection, now)
            if failure == nil { flush(index) }
            // TLS may hold decrypted replies that poll will not report: take them now.
            if failure == nil && connection.hasBufferedInput { receive(index, now) }
        } else if n == 0 || errno == ECONNRESET {
            var message = "\(plan.endpoint) closed a connection with \(connection.inFlight) requests unanswered"
            if !input.isEmpty { message += "; it last sent \(visible(input.readable))" }
            if let firstError { message += "; first error reply: \(firstError)" }
            failure = message
        } else if errno != EAGAIN && errno != EINTR {
            failure = "read from \(plan.endpoint) failed: \(errnoText())"
        }
    }

    private func parseReplies(_ connection: LoadConnection, _ now: UInt64) {
        let input = connection.input
        while connection.inFlight > 0 && !input.isEmpty {
            let (slot, keys, start) = connection.front
            switch plan.writer.target.parse(input.readable, expecting: expectedReplies[slot]) {
            case .incomplete:
                return
            case .garbage(let message):
                failure = "\(plan.endpoint) answered garbage to \(slotName(slot)): \(message)"
                return
            case .reply(let reply):
                record(reply, slot: slot, keys: keys, latency: now &- start, input: input)
                input.consume(reply.length)
                connection.pop()
                outstanding -= 1
                if plan.interval == nil && !stopping && canIssue { issue(on: connection, start: now) }
            }
        }
        if connection.inFlight == 0 && !input.isEmpty {
            failure = "\(plan.endpoint) sent bytes no request asked for: \(visible(input.readable))"
        }
    }

    @inline(__always)
    private func record(_ reply: Reply, slot: Int, keys: Int, latency: UInt64, input: ByteBuffer) {
        stats[slot].latency.record(latency)
        stats[slot].requests += 1
        stats[slot].keys += keys
        stats[slot].hits += reply.hits
        switch reply.outcome {
        case .done: break
        case .notFound: stats[slot].notFound += 1
        case .error:
            stats[slot].errors += 1
            if firstError == nil {
                firstError = "\(slotName(slot)): " + visible(UnsafeRawBufferPointer(rebasing: input.readable.prefix(reply.length)))
            }
        }
    }

    private func flush(_ index: Int) {
        let connection = connections[index]
        let output = connection.output
        while !output.isEmpty {
            let n = connection.send(output.readable.baseAddress!, count: output.count)
            if n > 0 {
                output.consume(n)
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && errno == EAGAIN {
                if !connection.watchingWrites { watch(index, writes: true) }
                return
            } else {
                failure = errno == EPIPE || errno == ECONNRESET
                    ? "\(plan.endpoint) closed a connection with \(connection.inFlight) requests unanswered"
                        + (firstError.map { "; first error reply: \($0)" } ?? "")
                    : "write to \(plan.endpoint) failed: \(errnoText())"
                return
            }
        }
        if connection.watchingWrites { watch(index, writes: false) }
    }

    private func watch(_ index: Int, writes: Bool) {
        pollSet[index].events = Int16(writes ? POLLIN | POLLOUT : POLLIN)
        connections[index].watchingWrites = writes
    }

    private func publish() {
        var replies = 0
        var errors = 0
        for s in stats {
            replies += s.requests
            errors += s.errors
        }
        if replies != publishedReplies {
            progress.replies.add(replies - publishedReplies, ordering: .relaxed)
            publishedReplies = replies
        }
        if errors != publishedErrors {
            progress.errors.add(errors - publishedErrors, ordering: .relaxed)
            publishedErrors = errors
        }
    }

    private func slotName(_ slot: Int) -> String {
        slot == preloadSlot ? "preload" : slot == warmSlot ? "warm" : Operation(rawValue: slot)!.description
    }
}
