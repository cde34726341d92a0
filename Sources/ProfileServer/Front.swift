// What the core asks of a front: a wire format the server speaks on some of its listeners.
// The executable registers the fronts (`ServerFronts`); the core names none of them.

/// A wire format the server speaks on some of its listeners, as the core sees it: what a
/// refused connection gets, what a new connection keeps, and the part of every worker that
/// decodes its requests and encodes their answers.
///
/// Immutable once the server starts; any thread may use it.
package protocol Front: AnyObject, Sendable {
    /// What the log says of a listener of this front (`proto=resp`); none for the default one.
    var logFields: [(key: String, value: String)] { get }
    /// The reply a connection past `--max-connections` gets before it is closed.
    var busyReply: [UInt8] { get }
    /// Who hears of every change the core commits or learns of, if this front has clients
    /// that must (RESP's client-side caching).
    var changeFeed: (any ChangeFeed)? { get }
    /// This front's part of `worker`; asked once per worker, before the workers start.
    func makeWorkerFront(for worker: Worker) -> any WorkerFront
    /// A new connection's session; `id` is unique among the connections of one run (RESP's
    /// `CLIENT ID`).
    func makeSession(id: Int) -> any FrontSession
    /// A TCP listener of this front was bound to `port`, with TLS or not.
    func bound(port: Int, tls: Bool)
}

/// The fronts an executable registers, by the listeners that speak them, and how the cache
/// keeps a profile (`CachedProfileEncoding`), which the front that answers most lookups
/// supplies.
///
/// Immutable; any thread may use it.
package struct ServerFronts: Sendable {
    /// The line protocol's: `--port`, `--tls-port` and `--unix-socket`.
    package let line: any Front
    /// RESP's: `--resp-port` and `--resp-tls-port`.
    package let resp: any Front
    package let cacheEncoding: any CachedProfileEncoding

    package init(line: any Front, resp: any Front, cacheEncoding: any CachedProfileEncoding) {
        self.line = line
        self.resp = resp
        self.cacheEncoding = cacheEncoding
    }

    /// Every front, in the order of their indices (`Connection.frontIndex`).
    var all: [any Front] { [line, resp] }
    static let lineIndex = 0
    static let respIndex = 1
}

/// One front's part of one worker: decodes its connections' requests and encodes their
/// answers, in its wire format. The core's request path (`RequestProcessor.serve`) asks it
/// what each request is and when to answer it; the front never decides the order, the reads,
/// the role check or the take-back of a failed reply itself.
///
/// Owned by its worker and used by that worker's thread only.
public protocol WorkerFront: AnyObject {
    /// What the front keeps of a connection between its requests (`FrontSession`): asked once
    /// a pass (`session(of:)`) and handed to each step of it, not asked of the connection at
    /// every step of every request.
    associatedtype Session: AnyObject
    func session(of connection: Connection) -> Session
    /// Serves the whole requests at the start of `bytes`; returns how many bytes it used. A
    /// front calls `RequestProcessor.serve` with itself, so that the core's request path is
    /// compiled for it.
    func serve(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int
    /// Writes what must go before the answer of a write the connection sent (RESP: the
    /// invalidations the write made for this connection, so a client cache never serves the
    /// old value after the write is acknowledged).
    func beforeAnswer(of job: WriteJob, on connection: Connection)

    // MARK: Decoding

    /// A pass over the connection's input begins, and serves `bytes` next, this connection
    /// alone until it ends: the front looks at the first whole requests before any is served,
    /// and leaves in the processor's `lookahead` the ids they look up; returns how many.
    func beginServing(_ bytes: UnsafeRawPointer, _ count: Int, on connection: Connection, session: Session) -> Int
    /// Decodes the request at the start of `input`, and keeps it until the next call.
    func decode(_ input: UnsafeMutableRawBufferPointer, on connection: Connection, session: Session) -> DecodedInput
    /// The request just decoded must wait: forget it, and anything decoding it changed, so
    /// that a later pass decodes it again from its first byte.
    func putBack(on connection: Connection, session: Session)
    /// What the request just decoded is, once its role was checked: its checks and anything
    /// that only the front knows (a transaction being queued) decide.
    func shape(on connection: Connection, session: Session) -> RequestShape

    // MARK: Answers

    /// Answers input that cannot be a request (`DecodedInput.malformed`).
    func answerMalformed(on connection: Connection)
    /// Answers a request the connection's role may not make: it has not authenticated
    /// (`connection.role == .none`), or its role is too low.
    func answerDenied(on connection: Connection, session: Session)
    /// Answers an `immediate` request, or hands on a `write` or a `listing`.
    func execute(on connection: Connection, session: Session)
    /// Lookup `index` of the request's `Lookups`, answered through the processor's
    /// `withProfile` or `lookUpEncoding`.
    /// - Throws: what those throw; a lookup that throws wrote and counted nothing.
    func answerLookup(_ index: Int, on connection: Connection, session: Session) throws
    /// Ends the reply of the request's lookups, all answered.
    func endLookups(on connection: Connection)
    /// One part of a reply in parts (`Lookups.inParts`), from its id alone: the request may
    /// be gone by then.
    /// - Throws: as `answerLookup`.
    func answerPart(of userId: UnsafeRawBufferPointer, on connection: Connection) throws
    /// Ends a reply in parts whose parts are all answered; the request may be gone by then.
    func endParts(on connection: Connection)
    /// Answers a request whose read of the store failed, for `reason` (the store's, which
    /// names no file of the server).
    func answerStoreFailure(_ reason: String, on connection: Connection)

    // MARK: Lookups the fetchers make

    /// The profile id lookup `index` of the request reads; nil when it names none (a key
    /// without the prefix), which no write touches and no fetcher reads.
    func lookupUserId(_ index: Int) -> UnsafeRawBufferPointer?
    /// The request's arguments, copied into a fetch for its answer to read, and which of them
    /// lookup `index` names, past `keyPrefixCount` bytes.
    var argumentCount: Int { get }
    func argument(_ index: Int) -> UnsafeRawBufferPointer
    func argumentIndex(ofLookup index: Int) -> Int
    var keyPrefixCount: Int { get }
    /// How the fetchers' reads of the request's lookups are answered; for lookups in parts,
    /// from the ids alone as arguments (the request may be gone), and with `restOfParts`, the
    /// parts left of a reply partly sent and its end.
    func fetchAnswer(for kind: RequestKind, restOfParts: Bool) -> any ReadAnswer
}

/// Who hears of the changes the core commits or learns of, once the cache holds what they left.
///
/// Thread-safe: writers, the shared store's listener and the lease watch call it.
package protocol ChangeFeed: AnyObject, Sendable {
    /// Whether anyone listens now: asked before anything else, so a change costs nothing more
    /// while nobody does.
    var isActive: Bool { get }
    /// These profiles changed; `origin` is the `changeOrigin` of the connection whose write
    /// changed them (0: another node, or no connection that listens). Each notice made for a
    /// connection is counted in `notices` (`ChangeNotices.expect`) and marked sent once it is
    /// on that connection's socket: the write is acknowledged only then. nil: no write waits.
    func changed(_ userIds: UnsafeBufferPointer<UnsafeRawBufferPointer>, origin: Int, notices: ChangeNotices?)
    /// Everything may have changed: a FLUSHALL, or a lease that ran out.
    func flushAll(notices: ChangeNotices?)
    /// STATS' `tracking_clients`, `tracking_keys` and `tracking_invalidations_sent`.
    var statistics: (clients: Int, keys: Int, invalidationsSent: Int) { get }
}

/// Something another thread hands a worker to do on its thread, for a connection of its front
/// (RESP: the invalidation pushes made for a tracking client).
///
/// Made by a front; used by the worker thread it is posted to.
package protocol WorkerDelivery: AnyObject {
    func deliver(on worker: Worker)
}

/// Every front's change feed as one: a change goes to each.
///
/// Immutable; any thread may use it.
final class ChangeFeeds: ChangeFeed {
    private let feeds: [any ChangeFeed]

    init(_ feeds: [any ChangeFeed]) {
        self.feeds = feeds
    }

    var isActive: Bool { feeds.contains { $0.isActive } }

    func changed(_ userIds: UnsafeBufferPointer<UnsafeRawBufferPointer>, origin: Int, notices: ChangeNotices?) {
        for feed in feeds where feed.isActive { feed.changed(userIds, origin: origin, notices: notices) }
    }

    func flushAll(notices: ChangeNotices?) {
        for feed in feeds where feed.isActive { feed.flushAll(notices: notices) }
    }

    var statistics: (clients: Int, keys: Int, invalidationsSent: Int) {
        feeds.reduce((0, 0, 0)) { sum, feed in
            let next = feed.statistics
            return (sum.0 + next.clients, sum.1 + next.keys, sum.2 + next.invalidationsSent)
        }
    }
}
