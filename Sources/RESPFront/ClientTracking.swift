import ProfileServer
import ProfileSystem
import RESPProtocol
import Synchronization

/// One RESP connection as client-side caching sees it: where its pushes go, and what a change
/// made anywhere must tell it (docs/RESP.md, "Client-side caching").
///
/// Made by the connection's session. Every field but `id` is guarded by the lock of the
/// `ClientTracking` that holds it; `connection` is only followed by the worker that holds the
/// connection.
final class TrackingClient: WorkerDelivery, @unchecked Sendable {
    /// `CLIENT ID`.
    let id: Int
    weak var connection: Connection?
    /// The worker that holds the connection now, which writes its pushes; nil before it is attached.
    var worker: Worker?
    var version = RESPVersion.resp2
    /// Subscribed to `__redis__:invalidate`, so that a RESP2 client may redirect its pushes here.
    var subscribed = false
    /// CLIENT TRACKING is on, in default mode (keys it read are remembered) or BCAST.
    var on = false
    var bcast = false
    var noloop = false
    /// The client that gets this one's invalidations; 0 for itself.
    var redirect = 0
    /// The redirect's client was gone when an invalidation was due (TRACKINGINFO's `broken_redirect`).
    var brokenRedirect = false
    /// BCAST's key prefixes, sorted; "" matches every key.
    var prefixes: [[UInt8]] = []
    /// Pushes made and not yet taken by the worker, whole.
    var pending: [[UInt8]] = []
    /// The writes' notices those pushes count in, marked sent once the worker has written them.
    var pendingNotices: [ChangeNotices] = []
    /// The worker has been told of `pending`.
    var posted = false
    /// Sends pushes straight to the connection's socket while it is quiet; nil on TLS, or
    /// before the client first tracked or subscribed.
    var outlet: PushOutlet?

    init(id: Int) {
        self.id = id
    }

    /// Writes the pushes made for this client's connection, if `worker` still holds it.
    func deliver(on worker: Worker) {
        guard let connection else { return }
        unsafeDowncast(worker.fronts[connection.frontIndex], to: RESPWorkerFront.self).deliverPushes(self, to: connection, on: worker)
    }
}

/// Who read which profile, for client-side caching: the table of keys each tracking client
/// read (default mode), the BCAST clients' prefixes, and the pushes every change, FLUSHALL or
/// lost lease makes. Bounded by `--tracking-table-max-keys`: past it, a random key leaves the
/// table and its readers are told it changed, as Redis does.
///
/// Thread-safe: workers remember reads and attach connections, writers and the shared
/// store's listener report changes, under one lock. A change while no client tracks costs an
/// atomic load.
final class ClientTracking: ChangeFeed, @unchecked Sendable {
    private let lock = ConditionLock()
    /// Every RESP connection attached to a worker, by `CLIENT ID`: REDIRECT's targets.
    private var clients: [Int: TrackingClient] = [:]
    /// Where each remembered userId is in `tracked`.
    private var positions: [[UInt8]: Int] = [:]
    /// Remembered userIds and the ids of the clients that read them since their last change.
    private var tracked: [(userId: [UInt8], readers: [Int])] = []
    /// How many remembered userIds fall in each slot, by a hash of each (`slot(of:)`); empty
    /// until the first is remembered. A change of an id nobody tracks, almost every write, is
    /// told apart here: looking it up in `positions` copies it and compares it with several
    /// keys (11% of the writer's time under SETs at pipeline 16 beside 100 tracking clients).
    private var slotCounts: [UInt32] = []
    private static let slotBits = 16
    /// With a seed of its own, so that clients cannot aim their ids at one slot.
    private let slotHasher = KeyHasher(seed: UInt64.random(in: .min ... .max))
    /// The ids of the clients in BCAST mode.
    private var broadcasters: [Int] = []
    private let maxKeys: Int
    /// What a RESP key adds before the userId (`--resp-key-prefix`): pushes name keys.
    private let keyPrefix: [UInt8]
    /// Clients with tracking on; while it is 0 a change has nothing to tell.
    private let trackingClients = Atomic<Int>(0)
    /// Invalidation pushes made (a flush counts one), for STATS and /metrics.
    private let invalidations = Atomic<Int>(0)
    /// The table's size, read by STATS without the lock.
    private let trackedCount = Atomic<Int>(0)

    init(maxKeys: Int, keyPrefix: [UInt8]) {
        self.maxKeys = maxKeys
        self.keyPrefix = keyPrefix
    }

    /// Whether any client tracks now: the request path asks before anything else.
    var isActive: Bool { trackingClients.load(ordering: .relaxed) > 0 }
    var clientCount: Int { trackingClients.load(ordering: .relaxed) }
    var keyCount: Int { trackedCount.load(ordering: .relaxed) }
    var invalidationsSent: Int { invalidations.load(ordering: .relaxed) }
    var statistics: (clients: Int, keys: Int, invalidationsSent: Int) { (clientCount, keyCount, invalidationsSent) }

    // MARK: Connections

    /// The client's connection is now on `worker` (opened, or moved between workers); pushes
    /// made while it moved go to the new worker. The worker's thread.
    func attach(_ client: TrackingClient, _ connection: Connection, to worker: Worker) {
        lock.lock()
        if clients[client.id] == nil {
            // Set once, before anyone can post for the client: workers read it unlocked.
            clients[client.id] = client
            client.connection = connection
        }
        client.worker = worker
        let ring = !client.pending.isEmpty
        if ring { client.posted = true }
        lock.unlock()
        if ring { worker.post(.deliver(client)) }
    }

    /// The connection is being handed to another worker: pushes made meanwhile wait for
    /// `attach` there. The handing worker's thread.
    func leave(_ client: TrackingClient) {
        lock.lock()
        client.worker = nil
        client.posted = false
        lock.unlock()
    }

    /// The connection closed: it tracks nothing and gets nothing more.
    func detach(_ client: TrackingClient) {
        lock.lock()
        if clients[client.id] === client { clients[client.id] = nil }
        turnOffLocked(client)
        client.subscribed = false
        client.pending = []
        client.worker = nil
        let dropped = client.pendingNotices
        client.pendingNotices = []
        lock.unlock()
        // Dropped with the connection: the writes need not wait for them.
        for notices in dropped { notices.sent() }
    }

    func clientExists(_ id: Int) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return clients[id] != nil
    }

    func setVersion(_ client: TrackingClient, _ version: RESPVersion) {
        lock.lock()
        client.version = version
        lock.unlock()
    }

    /// SUBSCRIBE or UNSUBSCRIBE of the invalidation channel; `outlet`: the connection's, for
    /// the pushes redirected to it.
    func setSubscribed(_ client: TrackingClient, _ subscribed: Bool, outlet: PushOutlet?) {
        lock.lock()
        client.subscribed = subscribed
        if let outlet { client.outlet = outlet }
        lock.unlock()
    }

    // MARK: CLIENT TRACKING

    /// CLIENT TRACKING ON with checked options. As Redis, BCAST adds its prefixes to those the
    /// client had (none given: every key). `outlet`: the connection's, for its pushes.
    func turnOn(_ client: TrackingClient, _ request: RESPTrackingRequest, outlet: PushOutlet?) {
        lock.lock()
        if let outlet { client.outlet = outlet }
        if !client.on { trackingClients.add(1, ordering: .relaxed) }
        client.on = true
        client.brokenRedirect = false
        client.noloop = request.noloop
        client.redirect = request.redirect ?? 0
        if request.bcast {
            if !client.bcast { broadcasters.append(client.id) }
            client.bcast = true
            let added = request.prefixes.isEmpty ? [[]] : request.prefixes
            client.prefixes = Array(Set(client.prefixes + added)).sorted { $0.lexicographicallyPrecedes($1) }
        }
        lock.unlock()
    }

    /// CLIENT TRACKING OFF. The keys it read stay in the table until they change, as in Redis,
    /// but tell it nothing more.
    func turnOff(_ client: TrackingClient) {
        lock.lock()
        turnOffLocked(client)
        lock.unlock()
    }

    private func turnOffLocked(_ client: TrackingClient) {
        if client.on { trackingClients.subtract(1, ordering: .relaxed) }
        if client.bcast { broadcasters.removeAll { $0 == client.id } }
        client.on = false
        client.bcast = false
        client.noloop = false
        client.redirect = 0
        client.brokenRedirect = false
        client.prefixes = []
    }

    /// What TRACKINGINFO and GETREDIR report.
    func state(of client: TrackingClient) -> (on: Bool, bcast: Bool, noloop: Bool, brokenRedirect: Bool, redirect: Int, prefixes: [[UInt8]]) {
        lock.lock()
        defer { lock.unlock() }
        return (client.on, client.bcast, client.noloop, client.brokenRedirect, client.redirect, client.prefixes)
    }

    // MARK: Reads and changes

    /// Remembers that the client read these userIds: the next change of each tells it. Called
    /// before the read, so that a change committed after the read's value was taken is never
    /// missed.
    func remember(_ userIds: [[UInt8]], for client: TrackingClient) {
        var deliveries = Deliveries()
        lock.lock()
        for key in userIds {
            if let position = positions[key] {
                if !tracked[position].readers.contains(client.id) { tracked[position].readers.append(client.id) }
                continue
            }
            positions[key] = tracked.count
            tracked.append((key, [client.id]))
            if slotCounts.isEmpty { slotCounts = [UInt32](repeating: 0, count: 1 << Self.slotBits) }
            slotCounts[key.withUnsafeBytes { slot(of: $0) }] += 1
            if tracked.count > maxKeys {
                // A random other key leaves, its readers told it changed.
                let victim = Int.random(in: 0..<tracked.count - 1)
                let (userId, readers) = removeTracked(at: victim)
                for reader in readers { tell(reader, keys: [userId], origin: 0, notices: nil, deliveries: &deliveries) }
            }
        }
        trackedCount.store(tracked.count, ordering: .relaxed)
        lock.unlock()
        dispatch(deliveries)
    }

    /// These profiles changed (`origin`: the client whose write it was, for NOLOOP; 0 for none
    /// of this node's, or another node's): each of their readers is told once, and every BCAST
    /// client whose prefix matches gets their keys in one push.
    func changed(_ userIds: UnsafeBufferPointer<UnsafeRawBufferPointer>, origin: Int, notices: ChangeNotices?) {
        guard isActive else { return }
        var deliveries = Deliveries()
        lock.lock()
        for userId in userIds where !positions.isEmpty {
            guard slotCounts[slot(of: userId)] > 0, let position = positions[Array(userId)] else { continue }
            let (key, readers) = removeTracked(at: position)
            for reader in readers { tell(reader, keys: [key], origin: origin, notices: notices, deliveries: &deliveries) }
        }
        for id in broadcasters {
            guard let client = clients[id], !(client.noloop && id == origin) else { continue }
            var keys: [[UInt8]] = []
            for userId in userIds {
                let key = keyPrefix + Array(userId)
                if client.prefixes.contains(where: { key.starts(with: $0) }) { keys.append(Array(userId)) }
            }
            if !keys.isEmpty { deliver(keys, for: client, notices: notices, deliveries: &deliveries) }
        }
        trackedCount.store(tracked.count, ordering: .relaxed)
        lock.unlock()
        dispatch(deliveries)
    }

    /// Everything may have changed (FLUSHALL, or a node whose lease ran out): the table is
    /// emptied and every tracking client is told to drop all it cached.
    func flushAll(notices: ChangeNotices?) {
        guard isActive || keyCount > 0 else { return }
        var deliveries = Deliveries()
        lock.lock()
        positions.removeAll()
        tracked.removeAll()
        for slot in slotCounts.indices { slotCounts[slot] = 0 }
        trackedCount.store(0, ordering: .relaxed)
        for client in clients.values where client.on {
            guard let target = target(of: client, deliveries: &deliveries) else { continue }
            enqueue(RESPPush.flush(target.version, nullVersion: client.version), redirected: target !== client, to: target,
                    notices: notices, deliveries: &deliveries)
        }
        lock.unlock()
        dispatch(deliveries)
    }

    /// Takes the pushes made for the client, and the writes' notices they count in (which the
    /// taker marks sent once it wrote them), if `worker` still holds its connection (else the
    /// worker it moved to takes them).
    func takePending(_ client: TrackingClient, on worker: Worker) -> (pushes: [[UInt8]], notices: [ChangeNotices])? {
        lock.lock()
        defer { lock.unlock() }
        guard client.worker === worker else { return nil }
        client.posted = false
        let taken = (client.pending, client.pendingNotices)
        client.pending = []
        client.pendingNotices = []
        return taken
    }

    // MARK: Under the lock

    /// A userId's slot in `slotCounts`.
    private func slot(of userId: UnsafeRawBufferPointer) -> Int {
        Int(truncatingIfNeeded: slotHasher.hash(userId) & (1 << Self.slotBits - 1))
    }

    /// What a change made for other threads to do once the lock is let go (`dispatch`).
    private struct Deliveries {
        /// Clients whose workers must be woken for pushes queued for them.
        var posts: [(TrackingClient, Worker)] = []
        /// Pushes for connections with an outlet, to send straight to their sockets.
        var direct: [(target: TrackingClient, outlet: PushOutlet, push: [UInt8], notices: ChangeNotices?)] = []
    }

    private func removeTracked(at position: Int) -> (userId: [UInt8], readers: [Int]) {
        let removed = tracked[position]
        positions[removed.userId] = nil
        slotCounts[removed.userId.withUnsafeBytes { slot(of: $0) }] -= 1
        let last = tracked.count - 1
        if position != last {
            tracked[position] = tracked[last]
            positions[tracked[position].userId] = position
        }
        tracked.removeLast()
        return removed
    }

    /// Tells a default-mode reader that these keys changed, unless it stopped tracking, went
    /// BCAST, or wrote them itself with NOLOOP.
    private func tell(_ id: Int, keys: [[UInt8]], origin: Int, notices: ChangeNotices?, deliveries: inout Deliveries) {
        guard let client = clients[id], client.on, !client.bcast, !(client.noloop && id == origin) else { return }
        deliver(keys, for: client, notices: notices, deliveries: &deliveries)
    }

    private func deliver(_ userIds: [[UInt8]], for client: TrackingClient, notices: ChangeNotices?,
                         deliveries: inout Deliveries) {
        guard let target = target(of: client, deliveries: &deliveries) else { return }
        enqueue(RESPPush.invalidation(keys: userIds.map { keyPrefix + $0 }, target.version), redirected: target !== client,
                to: target, notices: notices, deliveries: &deliveries)
    }

    /// Where the client's invalidations go: itself, or the client it redirects to; nil when
    /// that one is gone (a RESP3 client is told so).
    private func target(of client: TrackingClient, deliveries: inout Deliveries) -> TrackingClient? {
        guard client.redirect != 0 else { return client }
        if let target = clients[client.redirect] { return target }
        client.brokenRedirect = true
        if client.version == .resp3 { append(RESPPush.redirectBroken(client.redirect), to: client, notices: nil, deliveries: &deliveries) }
        return nil
    }

    /// A RESP3 connection takes the push; a RESP2 one only redirected to and subscribed, as a
    /// pub/sub message; anything else cannot carry it and it is dropped, as Redis does.
    private func enqueue(_ push: [UInt8], redirected: Bool, to target: TrackingClient, notices: ChangeNotices?,
                         deliveries: inout Deliveries) {
        guard target.version == .resp3 || (redirected && target.subscribed) else { return }
        invalidations.add(1, ordering: .relaxed)
        append(push, to: target, notices: notices, deliveries: &deliveries)
    }

    /// Makes a push for the client; the write whose `notices` it counts in is not acknowledged
    /// before it is on the client's socket. Sent straight there once the lock is let go when
    /// the connection has an outlet; else (or when that is shut) queued for its worker.
    private func append(_ push: [UInt8], to target: TrackingClient, notices: ChangeNotices?, deliveries: inout Deliveries) {
        notices?.expect()
        if let outlet = target.outlet {
            deliveries.direct.append((target, outlet, push, notices))
        } else {
            queue(push, for: target, notices: notices, deliveries: &deliveries)
        }
    }

    /// Queues a push for the client's worker, which marks its `notices` sent once it wrote it.
    private func queue(_ push: [UInt8], for target: TrackingClient, notices: ChangeNotices?, deliveries: inout Deliveries) {
        target.pending.append(push)
        if let notices { target.pendingNotices.append(notices) }
        wake(target, deliveries: &deliveries)
    }

    /// Has the client's worker told to write what waits for it (pushes, or the rest of one).
    private func wake(_ target: TrackingClient, deliveries: inout Deliveries) {
        if !target.posted, let worker = target.worker {
            target.posted = true
            deliveries.posts.append((target, worker))
        }
    }

    // MARK: Once the lock is let go

    /// Sends the pushes that can go straight to their sockets, queues the others for their
    /// workers, and wakes the workers that have pushes to write: no system call under the lock.
    private func dispatch(_ deliveries: Deliveries) {
        var posts = deliveries.posts
        for (target, outlet, push, notices) in deliveries.direct {
            let sent = push.withUnsafeBytes { outlet.send($0) }
            // On the socket, or its rest first in line on the connection: the write may be acknowledged.
            if sent != .refused { notices?.sent() }
            if sent == .whole { continue }
            var queued = Deliveries()
            lock.lock()
            if clients[target.id] !== target {
                // Closed meanwhile (`detach`): nobody reads it; the write need not wait.
                lock.unlock()
                if sent == .refused { notices?.sent() }
                continue
            }
            if sent == .refused { queue(push, for: target, notices: notices, deliveries: &queued) } else { wake(target, deliveries: &queued) }
            lock.unlock()
            posts += queued.posts
        }
        for (client, worker) in posts { worker.post(.deliver(client)) }
    }
}
