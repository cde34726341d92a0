import CLibevent
import Glibc
import ProfileCache
import ProfileModel
import ProfileStore
import ProfileSystem

/// What other threads tell a worker, through its inbox and doorbell.
package enum WorkerMessage: @unchecked Sendable {
    /// The acceptor hands over a new connection of a front (its index in `ServerFronts.all`),
    /// with its transport (a TLS one on a TLS listener); RESP's `CLIENT ID` is `sessionId`.
    case accepted(transport: Transport, frontIndex: Int, sessionId: Int)
    /// The writer answered these jobs (all of this worker's connections), in commit order.
    case answered([WriteJob])
    /// A fetcher read what these jobs asked for (all of this worker's connections).
    case fetched([ReadJob])
    /// Another worker hands over a connection with no writes in flight (see `LoopPolicy`).
    case moved(Connection)
    /// The clients' memory is past `--max-client-memory` and the sender holds no connection
    /// large enough to close: close this worker's largest, if it is.
    case reclaimClientMemory
    /// A front has something to do on this worker's thread for one of its connections.
    case deliver(any WorkerDelivery)
    /// Stop accepting work: answer what arrived, then close every connection and return.
    case stop
}

/// One event loop thread: its own event_base, connections, decoder, store reader and scratch.
///
/// Everything here runs on the worker's thread except `post`, which any thread may call.
package final class Worker: @unchecked Sendable {
    package let index: Int
    package let context: ServerContext
    let base: OpaquePointer
    private let doorbell: Int32
    private var doorbellEvent: OpaquePointer?
    /// Guarded by `inboxLock`, a pthread mutex: ThreadSanitizer cannot see the futex handoff
    /// in Synchronization's Mutex and reported every message.
    private var inbox: [WorkerMessage] = []
    private let inboxLock = ConditionLock()
    private var connections: [ObjectIdentifier: Connection] = [:]
    private var stopping = false
    private var stopDeadline: OpaquePointer?
    /// Set, under `inboxLock`, once the loop has ended: connections offered later are refused.
    private var closedToMoves = false
    /// Every worker, in index order, this one included; set by the server before the threads start.
    var peers: [PeerWorker] = []
    private var balanceTimer: OpaquePointer?
    private var sampler = LoopSampler()
    private var machineIdle = MachineIdle()
    /// When this worker last asked the others to close a large connection (monotonic nanoseconds).
    private var lastReclaimRequest = 0
    /// Worker 0's: the hold it set after its last spread, in milliseconds.
    private var gatherHold = 0
    private var nextSpreadTarget = 1

    // Request-path state, touched by this thread only.
    /// The request path every front shares.
    package let processor: RequestProcessor
    /// Each front's part of this worker, by front index (`Connection.frontIndex`); set once,
    /// at the end of `init`.
    package private(set) var fronts: [any WorkerFront] = []
    /// Where a connection with nothing pending reads into: its requests are served from
    /// here, and only what is left of them is copied to the connection.
    let readBuffer: UnsafeMutableRawPointer
    let readBufferBytes: Int
    let maxLine: Int

    /// How many callbacks the loop runs before it polls for newly ready sockets, and for how
    /// long at most: each runs at most one pass over a connection
    /// (`RequestProcessor.replyBytesPerPass`), but a pass over a large request can take a
    /// millisecond where the machine is slow (32 of them held a GET for 100 ms).
    static let callbacksBetweenPolls: Int32 = 32
    static let microsecondsBetweenPolls = 2_000
    /// The event priorities (`event_base_priority_init`): sockets, the inbox and timers first.
    static let freshPriority: Int32 = 0
    static let resumePriority: Int32 = 1
    /// How long a connection's resumed work waits behind fresh work at most, unless other
    /// connections' resumed work ran meanwhile (`resumeWaitedLong`).
    static let resumeBackstopMicroseconds = 50_000
    /// How many resumes (`Connection.resumeEvent`) this loop ran: whether that queue moves.
    fileprivate(set) var resumesRun = 0

    init(index: Int, context: ServerContext) throws(SystemError) {
        self.index = index
        self.context = context
        maxLine = context.configuration.maxLine
        processor = RequestProcessor(index: index, context: context, reads: context.reads.workerReads(index))
        let config = event_config_new()
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_NOLOCK.rawValue))
        // A connection that pauses its replies (`RequestProcessor.repliesMustPause`) goes on
        // through `event_active`, which libevent runs in the same turn, before it polls again:
        // without a bound, connections that keep making megabytes of replies would keep a
        // newly readable one from being seen until they are all backlogged (a GET waited
        // 300 to 800 ms behind 200 clients' MGETs).
        var betweenPolls = timeval(tv_sec: 0, tv_usec: Self.microsecondsBetweenPolls)
        event_config_set_max_dispatch_interval(config, &betweenPolls, Self.callbacksBetweenPolls, 0)
        guard let base = event_base_new_with_config(config) else {
            event_config_free(config)
            throw SystemError(call: "event_base_new", subject: "worker \(index)", code: ENOMEM)
        }
        // Two priorities: what the sockets, the inbox and the timers bring runs first; a
        // connection going on with work it already had (`Connection.resumeEvent`) runs only
        // when nothing else waits, so a new request is answered after at most one such pass,
        // however many connections are working through large replies.
        event_base_priority_init(base, 2)
        event_config_free(config)
        self.base = base
        doorbell = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard doorbell >= 0 else {
            let code = errno
            event_base_free(base)
            throw SystemError(call: "eventfd", subject: "worker \(index)", code: code)
        }
        readBufferBytes = max(maxLine, 65536)
        readBuffer = UnsafeMutableRawPointer.allocate(byteCount: readBufferBytes, alignment: 16)
        fronts = context.fronts.map { $0.makeWorkerFront(for: self) }
    }

    deinit {
        if let doorbellEvent { event_free(doorbellEvent) }
        if let stopDeadline { event_free(stopDeadline) }
        if let balanceTimer { event_free(balanceTimer) }
        event_base_free(base)
        Glibc.close(doorbell)
        readBuffer.deallocate()
    }

    /// Queues a message and rings the doorbell. Any thread.
    package func post(_ message: WorkerMessage) {
        _ = enqueue(message, refusingOnceClosed: false)
    }

    /// Queues a message unless told to refuse it after the loop ended, and rings the doorbell.
    private func enqueue(_ message: WorkerMessage, refusingOnceClosed: Bool) -> Bool {
        inboxLock.lock()
        if refusingOnceClosed && closedToMoves {
            inboxLock.unlock()
            return false
        }
        inbox.append(message)
        inboxLock.unlock()
        var one: UInt64 = 1
        _ = write(doorbell, &one, 8)
        return true
    }

    /// The thread's body: runs the loop until a stop message has been fully served.
    func run() {
        doorbellEvent = event_new(base, doorbell, Int16(EV_READ | EV_PERSIST), workerDoorbellRang,
                                  Unmanaged.passUnretained(self).toOpaque())
        event_priority_set(doorbellEvent, Self.freshPriority)
        event_add(doorbellEvent, nil)
        if peers.count > 1 {
            balanceTimer = event_new(base, -1, Int16(EV_PERSIST), workerBalanceTick, Unmanaged.passUnretained(self).toOpaque())
            event_priority_set(balanceTimer, Self.freshPriority)
            let ms = context.configuration.loopPolicy.tickMilliseconds
            var interval = timeval(tv_sec: ms / 1000, tv_usec: (ms % 1000) * 1000)
            event_add(balanceTimer, &interval)
        }
        event_base_dispatch(base)
        for connection in connections.values { connection.releaseResources() }
        connections.removeAll()
        processor.reads.release()
    }

    // MARK: Messages

    fileprivate func drainInbox() {
        var drained: UInt64 = 0
        _ = read(doorbell, &drained, 8)
        inboxLock.lock()
        let messages = inbox
        inbox.removeAll(keepingCapacity: true)
        inboxLock.unlock()
        for message in messages {
            switch message {
            case .accepted(let transport, let frontIndex, let sessionId): adopt(transport, frontIndex, sessionId: sessionId)
            case .answered(let answered): deliver(answered)
            case .fetched(let fetched): deliver(fetched)
            case .moved(let connection): attach(connection)
            case .reclaimClientMemory: reclaimClientMemory(askingPeers: false)
            case .deliver(let delivery): delivery.deliver(on: self)
            case .stop: beginStopping()
            }
        }
        // A stopping loop with nothing left waited for these messages to end.
        exitIfIdle()
    }

    private func adopt(_ transport: Transport, _ frontIndex: Int, sessionId: Int) {
        let role: Role = context.tokens.isEnabled ? .none : .admin
        let connection = Connection(transport: transport, frontIndex: frontIndex,
                                    session: context.fronts[frontIndex].makeSession(id: sessionId), worker: self, role: role)
        guard connection.handshaking else { return attach(connection) }
        // The timer belongs to this loop; a connection never moves before its handshake ends.
        connection.handshakeTimer = event_new(base, -1, 0, connectionHandshakeTimedOut,
                                              Unmanaged.passUnretained(connection).toOpaque())
        event_priority_set(connection.handshakeTimer, Self.freshPriority)
        var timeout = timeval(tv_sec: context.configuration.tlsHandshakeTimeoutSeconds, tv_usec: 0)
        event_add(connection.handshakeTimer, &timeout)
        attach(connection)
        if connection.phase == .serving { continueHandshake(connection) }
    }

    /// Takes the transport's handshake as far as the socket lets it. Once it is done the
    /// connection serves requests, with the role its verified certificate maps to in the
    /// tokens file, if any; a failed handshake closes it with nothing served.
    fileprivate func continueHandshake(_ connection: Connection) {
        guard connection.phase == .serving else { return }
        switch connection.transport.handshake() {
        case .done:
            connection.handshaking = false
            connection.waitsForWritable = false
            if let timer = connection.handshakeTimer { event_free(timer) }
            connection.handshakeTimer = nil
            context.statistics.tlsHandshakes.add(1, ordering: .relaxed)
            if context.tokens.isEnabled, let name = connection.transport.verifiedPeerCommonName,
               let role = context.tokens.role(ofCertificateName: name) {
                connection.role = role
            }
            // Requests that came with the handshake's last flight are read now.
            event_active(connection.readEvent, Int32(EV_READ), 0)
            account(connection)
            updateInterest(connection)
        case .wouldBlock:
            connection.waitsForWritable = false
            account(connection)
            updateInterest(connection)
        case .waitsForWritable:
            connection.waitsForWritable = true
            account(connection)
            updateInterest(connection)
        case .endOfStream, .failed:
            // The transport logged the reason of a failure.
            context.statistics.tlsHandshakeFailures.add(1, ordering: .relaxed)
            close(connection)
        }
    }

    fileprivate func handshakeTimedOut(_ connection: Connection) {
        guard connection.handshaking, connection.phase != .closed else { return }
        context.statistics.tlsHandshakeTimeouts.add(1, ordering: .relaxed)
        close(connection)
    }

    /// Registers a connection, new or handed over, with this loop.
    private func attach(_ connection: Connection) {
        let ctx = Unmanaged.passUnretained(connection).toOpaque()
        connection.worker = self
        connection.readEvent = event_new(base, connection.fd, Int16(EV_READ | EV_PERSIST), connectionReadable, ctx)
        connection.writeEvent = event_new(base, connection.fd, Int16(EV_WRITE | EV_PERSIST), connectionWritable, ctx)
        connection.resumeEvent = event_new(base, -1, 0, connectionResumed, ctx)
        connection.resumeBackstop = event_new(base, -1, 0, connectionResumeBackstop, ctx)
        event_priority_set(connection.readEvent, Self.freshPriority)
        event_priority_set(connection.writeEvent, Self.freshPriority)
        event_priority_set(connection.resumeEvent, Self.resumePriority)
        event_priority_set(connection.resumeBackstop, Self.freshPriority)
        connections[ObjectIdentifier(connection)] = connection
        connection.session.attached(connection, to: self)
        if stopping {
            connection.phase = .closing
            finishPass(connection)
            return
        }
        updateInterest(connection)
    }

    /// Answers write jobs in order; a connection whose writes are all answered resumes reading.
    private func deliver(_ answered: [WriteJob]) {
        var current: Connection? = nil
        let now = monotonicNanos()
        processor.beginPass(at: now)
        for job in answered {
            let connection = job.connection
            if connection.phase != .closed, let open = current, open !== connection { finishPass(open) }
            guard answer(job, now: now) else { continue }
            current = connection
        }
        if let open = current { finishPass(open) }
    }

    /// Writes one answered job's reply into the scratch, then the replies held behind it, or,
    /// behind a reply being made as the client reads, once that is done; false when its
    /// connection is closed and nothing was written.
    private func answer(_ job: WriteJob, now: Int) -> Bool {
        context.latency[index].record(job.kind, nanos: now - job.startNanos, count: 1)
        processor.requestsAnswered += 1
        let connection = job.connection
        // A connection with writes in flight never moves (`movableConnections`).
        precondition(connection.worker === self, "an answer reached a worker that no longer has its connection")
        connection.unansweredWrites.removeFirst()
        guard connection.phase != .closed else { return false }
        if connection.unfinishedReply != nil {
            waitToAnswer(job, behindTheRest: true)
        } else {
            writeAnswerOnceNoticed(job)
        }
        return true
    }

    /// Puts a committed write's answer among those that wait for the connection's unfinished
    /// reply: last, or, when it must wait for its own notices, first.
    private func waitToAnswer(_ job: WriteJob, behindTheRest: Bool) {
        let connection = job.connection
        connection.writeAnswersWaiting += 1
        let answer = { (worker: Worker) in
            connection.writeAnswersWaiting -= 1
            worker.writeAnswerOnceNoticed(job)
        }
        if behindTheRest { connection.answersWaiting.append(answer) } else { connection.answersWaiting.insert(answer, at: 0) }
    }

    /// A committed write's answer, once the notices its commit made for other connections are
    /// sent (`ChangeNotices`); until then it waits, with everything after it.
    fileprivate func writeAnswerOnceNoticed(_ job: WriteJob) {
        let connection = job.connection
        if let notices = job.notices, !notices.allSent(waking: self, for: connection) {
            connection.unfinishedReply = AwaitedNotices(notices)
            return waitToAnswer(job, behindTheRest: false)
        }
        writeAnswer(of: job)
    }

    /// The notices a write's answer waited for are sent: go on with the connection's answers
    /// and input, unless it closed or moved meanwhile.
    func goOn(with connection: Connection) {
        guard connection.worker === self, connection.phase == .serving else { return }
        processor.beginPass(at: monotonicNanos())
        handlePending(connection)
        finishPass(connection)
    }

    /// A committed write's answer: what must go before it, its reply (its parts as far as the
    /// connection's replies may go), then the replies held behind it, which wait for the rest of
    /// the reply if it paused.
    fileprivate func writeAnswer(of job: WriteJob) {
        let connection = job.connection
        let front = fronts[connection.frontIndex]
        front.beforeAnswer(of: job, on: connection)
        job.answer.write(job, through: front)
        let parts = job.answer.partCount(of: job)
        if parts > 0 {
            processor.writeParts(parts, heldBytes: job.heldBytes, on: connection, front: front) {
                job.answer.writePart($0, of: job, through: $1)
            }
        }
        if connection.unfinishedReply == nil {
            processor.releaseHeldReplies(connection)
        } else {
            connection.answersWaiting.insert({ $0.processor.releaseHeldReplies(connection) }, at: 0)
        }
    }

    /// The jobs of this worker a submit committed in its thread (`WriteCoordinator.submit`):
    /// answered in this pass when they are all the connection's writes in flight, after the
    /// replies before them in the scratch; otherwise queued behind the answers already in the
    /// inbox, which are older.
    private func answerCommitted(_ answered: [WriteJob], on connection: Connection) {
        guard !answered.isEmpty else { return }
        var all = connection.phase != .closed && connection.writesInFlight == answered.count
        for job in answered where job.connection !== connection { all = false }
        guard all else {
            post(.answered(answered))
            return
        }
        let now = monotonicNanos()
        for job in answered { _ = answer(job, now: now) }
    }

    /// Answers reads made by the fetchers; a connection whose reads are all answered resumes.
    private func deliver(_ fetched: [ReadJob]) {
        var current: Connection? = nil
        let now = monotonicNanos()
        processor.beginPass(at: now)
        let latency = context.latency[index]
        for job in fetched {
            if let kind = job.kind {
                latency.record(kind, nanos: now - job.startNanos, count: 1)
                processor.requestsAnswered += 1
            }
            let connection = job.connection
            precondition(connection.worker === self, "an answer reached a worker that no longer has its connection")
            guard connection.phase != .closed else { continue }
            if let open = current, open !== connection { finishPass(open) }
            current = connection
            connection.readsInFlight -= 1
            if connection.unfinishedReply != nil {
                // Written by whichever worker holds the connection by then.
                connection.answersWaiting.append { $0.processor.answerFetched(job, through: $0.fronts[connection.frontIndex]) }
            } else {
                processor.answerFetched(job, through: fronts[connection.frontIndex])
            }
        }
        if let open = current { finishPass(open) }
    }

    private func beginStopping() {
        stopping = true
        // Connections that cannot finish in time (a client that never reads) are cut off.
        stopDeadline = event_new(base, -1, 0, workerStopDeadline, Unmanaged.passUnretained(self).toOpaque())
        event_priority_set(stopDeadline, Self.freshPriority)
        var deadline = timeval(tv_sec: 10, tv_usec: 0)
        event_add(stopDeadline, &deadline)
        for connection in Array(connections.values) where connection.phase == .serving {
            connection.phase = .closing
            finishPass(connection)
        }
        exitIfIdle()
    }

    private func exitIfIdle() {
        guard stopping && connections.isEmpty else { return }
        // A connection handed over before the stop reached its sender is still to be served.
        inboxLock.lock()
        let nothingArriving = inbox.isEmpty
        if nothingArriving { closedToMoves = true }
        inboxLock.unlock()
        if nothingArriving { event_base_loopbreak(base) }
    }

    // MARK: Moving connections between loops

    fileprivate func balanceTick() {
        let now = monotonicNanos()
        let load = sampler.take(now: now, requests: processor.requestsAnswered)
        let loads = context.loops
        loads.workers[index].busyPermille.store(load.busyPermille, ordering: .relaxed)
        guard !stopping else { return }
        let policy = context.configuration.loopPolicy
        if index == 0 {
            let idle = machineIdle.take(now: now)
            guard policy.shouldSpread(busyPermille: load.busyPermille, idleMillicores: idle) else { return }
            gatherHold = policy.nextHold(after: gatherHold)
            loads.gatherHoldUntil.store(now + gatherHold * 1_000_000, ordering: .relaxed)
            var spreading = false
            for connection in movableConnections() {
                spreading.toggle()
                guard spreading else { continue }
                hand(connection, to: peers[nextSpreadTarget].worker)
                nextSpreadTarget = nextSpreadTarget % (peers.count - 1) + 1
            }
            Log.info("spreading connections over the workers", ["busy_permille": "\(load.busyPermille)",
                     "idle_millicores": "\(idle)", "gather_hold_ms": "\(gatherHold)"])
        } else {
            let holding = now < loads.gatherHoldUntil.load(ordering: .relaxed)
            let firstBusy = loads.workers[0].busyPermille.load(ordering: .relaxed)
            guard policy.shouldGather(requests: load.requests, sleeps: load.sleeps, firstBusyPermille: firstBusy,
                                      holding: holding) else { return }
            for connection in movableConnections() { hand(connection, to: peers[0].worker) }
        }
    }

    /// Connections that can move: everything else of theirs (unhandled input, unsent replies)
    /// lives in the connection. Not with writes in flight, whose answers come to this worker,
    /// nor half closed, which only a pass over it here would finish.
    private func movableConnections() -> [Connection] {
        // Nor one with answers waiting behind its unfinished reply: the notices a write's answer
        // waits for wake this worker. (A reply made as the client reads moves with it: the
        // worker that holds it goes on with it through its own front.)
        connections.values.filter {
            $0.phase == .serving && $0.jobsInFlight == 0 && $0.answersWaiting.isEmpty && !$0.peerClosed && !$0.handshaking
        }
    }

    /// Hands a connection between requests to another worker; keeps it if that one has stopped.
    private func hand(_ connection: Connection, to target: Worker) {
        connection.shutPushOutlet()
        connection.session.leaving()
        connection.detachEvents()
        connections.removeValue(forKey: ObjectIdentifier(connection))
        if target.offer(connection) {
            context.loops.moves.add(1, ordering: .relaxed)
            if Log.level <= .debug {
                Log.debug("connection handed over", ["fd": "\(connection.fd)", "worker": "\(index)", "to_worker": "\(target.index)"])
            }
        } else {
            attach(connection)
        }
    }

    /// Queues a handed-over connection unless this worker's loop has ended. Any thread.
    func offer(_ connection: Connection) -> Bool {
        enqueue(.moved(connection), refusingOnceClosed: true)
    }

    fileprivate func forceStop() {
        for connection in Array(connections.values) { close(connection) }
        event_base_loopbreak(base)
    }

    // MARK: Socket events

    fileprivate func readable(_ connection: Connection) {
        guard connection.phase == .serving else { return }
        if connection.handshaking { return continueHandshake(connection) }
        processor.beginPass(at: monotonicNanos())
        if connection.pending.isEmpty && connection.unfinishedReply == nil {
            guard !connection.peerClosed else { return finishPass(connection) }
            // Never more than the front's input limit: what is left unhandled must fit the connection.
            let received = connection.transport.receive(into: readBuffer, count: min(readBufferBytes, connection.pending.limit))
            if case .done(let n) = received {
                let used = handleInput(connection, readBuffer, n)
                if used < n && connection.phase == .serving {
                    connection.pending.keep(readBuffer + used, count: n - used)
                }
            } else {
                noteReadResult(connection, received)
            }
        } else {
            // Never more than the front's input limit buffered: a request longer than that is
            // refused, not stored.
            if !connection.peerClosed && connection.jobsInFlight == 0 && connection.unfinishedReply == nil {
                let room = connection.pending.room()
                if room.count > 0 {
                    let received = connection.transport.receive(into: room.baseAddress!, count: room.count)
                    if case .done(let n) = received { connection.pending.received(n) } else { noteReadResult(connection, received) }
                }
            }
            handlePending(connection)
        }
        finishPass(connection)
    }

    /// What a receive that brought no bytes means for the connection.
    private func noteReadResult(_ connection: Connection, _ result: TransportResult) {
        switch result {
        case .done, .wouldBlock: break
        case .endOfStream: connection.peerClosed = true
        case .waitsForWritable: connection.waitsForWritable = true
        case .failed: close(connection)
        }
    }

    fileprivate func writable(_ connection: Connection) {
        guard connection.phase != .closed else { return }
        if connection.handshaking { return continueHandshake(connection) }
        connection.shutPushOutlet()
        guard connection.repliesHeldBack || connection.transport.sendQueued(connection.output) else {
            close(connection)
            return
        }
        // A read that had to wait for the transport to send first goes on now.
        if connection.waitsForWritable {
            connection.waitsForWritable = false
            return readable(connection)
        }
        // Room again: take up the MGET and the input that backpressure left waiting.
        if connection.phase == .serving && (connection.unfinishedReply != nil || !connection.pending.isEmpty) {
            processor.beginPass(at: monotonicNanos())
            handlePending(connection)
        }
        finishPass(connection)
    }

    /// Finishes an unfinished reply as far as the high-water mark lets it, then serves the
    /// requests kept in the connection's own buffer once it is done.
    private func handlePending(_ connection: Connection) {
        guard connection.phase == .serving, continueReplies(connection), !connection.pending.isEmpty else { return }
        let used = handleInput(connection, connection.pending.base!, connection.pending.count)
        if connection.phase != .closed { connection.pending.consume(used) }
    }

    /// Goes on with the connection's unfinished reply (an MGET's lookups, a job's answer in
    /// parts), then writes the answers that waited behind it, in order, as far as the
    /// high-water mark lets it; true when nothing is left unfinished.
    private func continueReplies(_ connection: Connection) -> Bool {
        while true {
            let front = fronts[connection.frontIndex]
            if let answer = connection.unfinishedReply as? UnfinishedAnswer {
                guard answer.resume(processor, on: connection, front: front) else { return false }
                connection.unfinishedReply = nil
            } else if let awaited = connection.unfinishedReply as? AwaitedNotices {
                guard awaited.notices.allSent(waking: self, for: connection) else { return false }
                connection.unfinishedReply = nil
            } else if connection.unfinishedReply != nil {
                guard processor.continueLookups(connection, front: front) else { return false }
            }
            guard !connection.answersWaiting.isEmpty, connection.phase != .closed else { return connection.phase != .closed }
            connection.answersWaiting.removeFirst()(self)
        }
    }

    /// Serves the whole requests at the start of `bytes` in the connection's protocol; returns
    /// how many bytes it used, and notes whether it stopped for want of more (`WorkerFront.serve`).
    func handleInput(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int {
        // No push may overtake a reply whose value is read from here on.
        connection.shutPushOutlet()
        connection.needsMoreInput = false
        return fronts[connection.frontIndex].serve(connection, bytes, count)
    }

    /// Ends a pass over a connection: hand writes to the writer, publish counters, send
    /// replies, and decide what to wait for next.
    package func finishPass(_ connection: Connection) {
        // Nothing else sends on the socket while this pass does.
        connection.shutPushOutlet()
        processor.reads.endPass()
        if !processor.jobs.isEmpty {
            let answered = context.writer(for: connection).submit(processor.jobs, from: self)
            processor.jobs.removeAll(keepingCapacity: true)
            answerCommitted(answered, on: connection)
        }
        if !processor.fetchJobs.isEmpty {
            processor.reads.submit(processor.fetchJobs)
            processor.fetchJobs.removeAll(keepingCapacity: true)
        }
        context.workerStatistics[index].publish(processor.counters)
        if processor.passKindsSeen != 0 { processor.recordPassLatency() }
        if connection.phase == .closed {
            processor.out.count = 0
            return
        }
        if !connection.repeatedOnceReadsAreAnswered.isEmpty && !connection.hasReadsUnanswered {
            // After this pass's replies, which hold the last of the replies they must follow.
            processor.spill(connection)
            let repeated = connection.takeRepeatedBytes()
            repeated.withUnsafeBytes { _ = evbuffer_add(connection.output, $0.baseAddress, $0.count) }
        }
        flush(connection)
        guard connection.phase != .closed else { return }
        account(connection)
        guard connection.phase != .closed else { return }
        let idle = connection.jobsInFlight == 0 && connection.queuedOutput == 0
        if idle && (connection.phase == .closing || (connection.peerClosed && !connection.hasWorkWaiting)) {
            close(connection)
            return
        }
        if connection.queuedOutput > context.configuration.outputHardLimit {
            Log.warn("closing a connection whose replies pile up unread", ["bytes": "\(connection.queuedOutput)"])
            close(connection)
            return
        }
        updateInterest(connection)
        if let outlet = connection.pushOutlet, connection.isQuiet { outlet.open() }
    }

    /// Sends the pass's replies: straight from scratch when nothing is queued before them.
    private func flush(_ connection: Connection) {
        var sent = 0
        // Nothing is sent while the connection's replies are held back; they wait in its queue.
        let held = connection.repliesHeldBack
        if processor.out.count > 0 && connection.queuedOutput == 0 && !held {
            switch connection.transport.send(processor.out.base, count: processor.out.count) {
            case .done(let n): sent = n
            case .wouldBlock, .waitsForWritable: break
            case .endOfStream, .failed:
                processor.out.count = 0
                close(connection)
                return
            }
        }
        // What the socket did not take waits in the queue, which the transport sends first from now on.
        if sent < processor.out.count { evbuffer_add(connection.output, processor.out.base + sent, processor.out.count - sent) }
        processor.out.count = 0
        if sent == 0 && connection.queuedOutput > 0 && !held && !connection.transport.sendQueued(connection.output) { close(connection) }
    }

    /// Registers for exactly the events the connection can use now.
    private func updateInterest(_ connection: Connection) {
        let backlogged = connection.queuedOutput >= context.configuration.outputHighWater
        let handshakeStep = connection.handshaking && connection.phase == .serving
        let wantRead = handshakeStep ? !connection.waitsForWritable : connection.phase == .serving && !connection.peerClosed
            && connection.jobsInFlight == 0 && !backlogged
        if wantRead != connection.reading {
            if wantRead { event_add(connection.readEvent, nil) } else { event_del(connection.readEvent) }
            connection.reading = wantRead
        }
        let wantWrite = (connection.queuedOutput > 0 && !connection.repliesHeldBack) || connection.waitsForWritable
        if wantWrite != connection.writing {
            if wantWrite { event_add(connection.writeEvent, nil) } else { event_del(connection.writeEvent) }
            connection.writing = wantWrite
        }
        // Requests left by the per-wake-up budget or by waiting for writes, and replies paused
        // for their pass's share: come back to them once nothing fresher waits.
        if connection.phase == .serving && !connection.handshaking && connection.jobsInFlight == 0 && !backlogged
            && connection.hasWorkWaiting {
            event_active(connection.resumeEvent, 0, 0)
            // Should fresh work keep every turn busy, the backstop brings it back anyway.
            armResumeBackstop(connection)
        }
    }

    private func armResumeBackstop(_ connection: Connection) {
        connection.resumesRunWhenQueued = resumesRun
        var backstop = timeval(tv_sec: 0, tv_usec: Self.resumeBackstopMicroseconds)
        event_add(connection.resumeBackstop, &backstop)
    }

    /// A connection's resume waited `resumeBackstopMicroseconds`. While other resumes ran
    /// meanwhile, its turn is coming (the queue is first in, first out) and it waits on, behind
    /// fresh work: were it served now, at fresh work's priority, the backstops of a long queue
    /// of large replies would all jump ahead of a new request together (a GET waited 100 to
    /// 318 ms behind 200 clients' MGETs, debug build). Only when fresh work kept every turn
    /// busy, so that no resume ran at all, is it served now.
    fileprivate func resumeWaitedLong(_ connection: Connection) {
        if resumesRun != connection.resumesRunWhenQueued { return armResumeBackstop(connection) }
        event_del(connection.resumeEvent)
        resumesRun &+= 1
        readable(connection)
    }

    func close(_ connection: Connection) {
        guard connection.phase != .closed else { return }
        if Log.level <= .debug { Log.debug("connection closed", ["fd": "\(connection.fd)", "worker": "\(index)"]) }
        connection.releaseResources()
        account(connection)
        connections.removeValue(forKey: ObjectIdentifier(connection))
        context.statistics.currentConnections.subtract(1, ordering: .relaxed)
        exitIfIdle()
    }

    // MARK: The clients' memory

    /// Brings the connection's share of the clients' memory up to date (none once closed);
    /// past `--max-client-memory`, closes the connections that hold the most. The same for
    /// every front: what a connection holds is counted the same way whatever it speaks.
    private func account(_ connection: Connection) {
        let bytes = connection.phase == .closed ? 0 : connection.memoryBytes
        let delta = bytes - connection.accountedBytes
        guard delta != 0 else { return }
        connection.accountedBytes = bytes
        let statistics = context.statistics
        let total = statistics.clientMemoryBytes.add(delta, ordering: .relaxed).newValue
        if delta > 0 && total > statistics.clientMemoryPeak.load(ordering: .relaxed) {
            statistics.clientMemoryPeak.store(total, ordering: .relaxed)
        }
        let limit = context.configuration.maxClientMemory
        if delta > 0 && limit > 0 && total > limit { reclaimClientMemory(askingPeers: true) }
    }

    /// While the clients hold more than `--max-client-memory`, closes this worker's connection
    /// that holds the most, as long as it holds at least the average of all connections (so
    /// that one worker's small clients never pay for another's large ones); otherwise asks the
    /// other workers, at most every 10 ms, to do the same with theirs.
    private func reclaimClientMemory(askingPeers: Bool) {
        let statistics = context.statistics
        let limit = context.configuration.maxClientMemory
        guard limit > 0 else { return }
        while true {
            let total = statistics.clientMemoryBytes.load(ordering: .relaxed)
            guard total > limit else { return }
            let average = total / max(1, statistics.currentConnections.load(ordering: .relaxed))
            guard let largest = connections.values.max(by: { $0.accountedBytes < $1.accountedBytes }),
                  largest.accountedBytes > 0, largest.accountedBytes >= average else {
                let now = monotonicNanos()
                if askingPeers && now - lastReclaimRequest > 10_000_000 {
                    lastReclaimRequest = now
                    for peer in peers where peer.worker !== self { peer.worker.post(.reclaimClientMemory) }
                }
                return
            }
            Log.warn("closing the client connection that holds the most memory: the clients hold more than max-client-memory",
                     ["bytes": "\(largest.accountedBytes)", "clients_bytes": "\(total)", "limit": "\(limit)"])
            statistics.clientEvictions.add(1, ordering: .relaxed)
            close(largest)
        }
    }
}

// libevent calls these on the worker's thread; they are global functions because a C
// callback cannot capture context (STYLE: closures here would be inferred @MainActor).

private func workerDoorbellRang(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().drainInbox()
}

private func workerBalanceTick(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().balanceTick()
}

private func workerStopDeadline(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().forceStop()
}

private func connectionReadable(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<Connection>.fromOpaque(context!).takeUnretainedValue()
    connection.worker.readable(connection)
}

private func connectionResumed(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<Connection>.fromOpaque(context!).takeUnretainedValue()
    event_del(connection.resumeBackstop)
    connection.worker.resumesRun &+= 1
    connection.worker.readable(connection)
}

private func connectionResumeBackstop(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<Connection>.fromOpaque(context!).takeUnretainedValue()
    connection.worker.resumeWaitedLong(connection)
}

private func connectionHandshakeTimedOut(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<Connection>.fromOpaque(context!).takeUnretainedValue()
    connection.worker.handshakeTimedOut(connection)
}

private func connectionWritable(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<Connection>.fromOpaque(context!).takeUnretainedValue()
    connection.worker.writable(connection)
}

/// A worker as another worker sees it: not owned, since the server owns them all.
struct PeerWorker {
    unowned let worker: Worker
}
