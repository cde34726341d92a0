import ProfileServer
import RESPProtocol

/// What a RESP connection carries from one request to the next.
///
/// Owned by its connection, and used by the worker thread that holds the connection.
final class RESPSession: FrontSession {
    let inputLimit: Int
    /// How far the decoder got into a request that has not fully arrived.
    var decodeState = RESPDecodeState()
    var version = RESPVersion.resp2
    /// `CLIENT SETNAME`'s, or HELLO's `SETNAME`; nil until one is given.
    var name: [UInt8]? = nil
    /// `CLIENT ID`: unique among the connections of one run of the server.
    let id: Int
    /// Set between MULTI and EXEC or DISCARD.
    var transaction: RESPTransaction? = nil
    /// What client-side caching knows of this connection, shared with the threads that report changes.
    let tracking: TrackingClient
    private let trackingTable: ClientTracking
    /// Which of its key reads CLIENT TRACKING remembers.
    var remembers = RememberedReads.none {
        didSet { hasTrackingOrChannels = remembers != .none || !channels.isEmpty }
    }
    /// Whether either of `remembers` and `channels` asks anything of a command: one test on
    /// the request path for both.
    private(set) var hasTrackingOrChannels = false
    /// `CLIENT CACHING yes` (OPTIN) or `no` (OPTOUT) was given for the next command.
    var cachingGiven = false
    /// The channels SUBSCRIBE named, in the order given; only the invalidation channel carries anything.
    var channels: [[UInt8]] = [] {
        didSet { hasTrackingOrChannels = remembers != .none || !channels.isEmpty }
    }
    /// BCAST prefixes' bytes, counted in the clients' memory.
    var prefixBytes = 0

    /// What CLIENT TRACKING remembers of a connection's key reads.
    enum RememberedReads {
        /// Nothing: tracking is off, or BCAST, which tells of every change under its prefixes.
        case none
        /// Every key read.
        case all
        /// Only the next command's, after `CLIENT CACHING yes`.
        case optin
        /// Every one but the next command's after `CLIENT CACHING no`.
        case optout
    }

    init(id: Int, inputLimit: Int, tracking table: ClientTracking) {
        self.id = id
        self.inputLimit = inputLimit
        tracking = TrackingClient(id: id)
        trackingTable = table
    }

    var heldBytes: Int { (transaction?.bytes ?? 0) + trackingBytes }
    /// What the channels' names and BCAST's prefixes hold, counted in the clients' memory.
    private var trackingBytes: Int { prefixBytes + (channels.isEmpty ? 0 : channels.reduce(0) { $0 + $1.count + 48 }) }

    func attached(_ connection: Connection, to worker: Worker) {
        trackingTable.attach(tracking, connection, to: worker)
    }

    func leaving() {
        trackingTable.leave(tracking)
    }

    func release() {
        transaction = nil
        trackingTable.detach(tracking)
    }
}

extension Connection {
    /// The session of a connection of the RESP front; only RESP's request path asks.
    var resp: RESPSession { unsafeDowncast(session, to: RESPSession.self) }
}

/// The commands a MULTI queued, each checked when it was queued.
///
/// Owned by its session.
final class RESPTransaction {
    /// Every queued command's arguments, back to back.
    private(set) var arguments: [[UInt8]] = []
    /// Where each queued command's arguments start in `arguments`, and how many it has.
    private(set) var commands: [(command: RESPCommandName, first: Int, count: Int)] = []
    /// A command could not be queued: EXEC answers EXECABORT and writes nothing, so nothing
    /// more is kept.
    private(set) var failed = false
    /// What the queue holds: its arguments' bytes, and an allowance for each one's array.
    private(set) var bytes = 0
    /// The most bytes the queued commands' replies can take together.
    private(set) var replyBytes = 0

    /// The count of commands an EXEC answers.
    static let maxCommands = 1000
    /// The queue's memory: twice a transaction of 1,000 commands of the longest arguments a
    /// profile's key, fields and values take (about 2.4 KB a command), so only a queue built
    /// to hold memory meets it.
    static let maxBytes = 4 << 20
    /// The replies' bound, checked as commands are queued, so that EXEC never makes more: a
    /// thousand HMGETs of a thousand of the longest values would otherwise take 2 GB.
    static let maxReplyBytes = 16 << 20
    /// What one queued argument costs beyond its bytes: its array's header and allocation.
    static let argumentOverhead = 48

    /// The bytes `arguments` would add to the queue.
    static func cost(of arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Int {
        arguments.reduce(0) { $0 + $1.count + argumentOverhead }
    }

    /// Queues a checked command of `cost(of: arguments)` bytes whose reply takes at most
    /// `replyBound`; the caller made sure both fit.
    func queue(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, cost: Int, replyBound: Int) {
        commands.append((command, self.arguments.count, arguments.count))
        for argument in arguments { self.arguments.append(Array(argument)) }
        bytes += cost
        replyBytes += replyBound
    }

    /// The transaction cannot run: its queue goes at once.
    func fail() {
        failed = true
        arguments = []
        commands = []
        bytes = 0
        replyBytes = 0
    }
}

extension RESPCommandName {
    /// The kind of request its latency counts as, the same as the line protocol's command
    /// that does the same: lookups count as GET, hash writes as SET or UPDATE, a transaction
    /// as MSET (writes committed together), and commands about the connection as PING.
    var kind: RequestKind {
        switch self {
        case .ping, .echo, .hello, .select, .client, .command, .config, .multi, .discard, .watch, .unwatch, .subscribe,
             .unsubscribe: .ping
        case .auth: .auth
        case .quit: .quit
        case .info: .stats
        case .dbsize: .count
        case .hget, .hmget, .hgetall, .hexists, .hlen, .hstrlen, .hkeys, .hvals, .type, .ttl, .pttl: .get
        case .exists: .exists
        case .hset, .hmset: .set
        case .hsetnx, .hdel: .update
        case .del, .unlink: .del
        case .scan: .scan
        case .flushall, .flushdb: .flushall
        case .exec: .mset
        }
    }
}

extension RESPCommandName {
    /// Whether a shared store's fetchers answer it when the cache cannot.
    var isFetched: Bool { readsKey || self == .exists || self == .scan || self == .dbsize }
}
