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

/// One front's part of one worker: decodes its connections' requests, checks each, and answers
/// them through the worker's request processor, in its wire format.
///
/// Owned by its worker and used by that worker's thread only.
package protocol WorkerFront: AnyObject {
    /// Serves the whole requests at the start of `bytes`; returns how many bytes it used.
    ///
    /// Stops early at the per-wake-up budget, when replies pile up, when a request must wait
    /// for this connection's jobs in flight, and at a request that ends the connection; sets
    /// `needsMoreInput` when it stopped for want of bytes.
    func serve(_ connection: Connection, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Int
    /// Goes on with a reply that backpressure left unfinished, as far as the high-water mark
    /// lets it; true when nothing is left unfinished.
    func resume(_ connection: Connection) -> Bool
    /// Writes what must go before the answer of a write the connection sent (RESP: the
    /// invalidations the write made for this connection, so a client cache never serves the
    /// old value after the write is acknowledged).
    func beforeAnswer(of job: WriteJob, on connection: Connection)
}

/// Who hears of the changes the core commits or learns of, once the cache holds what they left.
///
/// Thread-safe: writers, the shared store's listener and the lease watch call it.
package protocol ChangeFeed: AnyObject, Sendable {
    /// Whether anyone listens now: asked before anything else, so a change costs nothing more
    /// while nobody does.
    var isActive: Bool { get }
    /// These profiles changed; `origin` is the `changeOrigin` of the connection whose write
    /// changed them (0: another node, or no connection that listens).
    func changed(_ userIds: UnsafeBufferPointer<UnsafeRawBufferPointer>, origin: Int)
    /// Everything may have changed: a FLUSHALL, or a lease that ran out.
    func flushAll()
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

    func changed(_ userIds: UnsafeBufferPointer<UnsafeRawBufferPointer>, origin: Int) {
        for feed in feeds where feed.isActive { feed.changed(userIds, origin: origin) }
    }

    func flushAll() {
        for feed in feeds where feed.isActive { feed.flushAll() }
    }

    var statistics: (clients: Int, keys: Int, invalidationsSent: Int) {
        feeds.reduce((0, 0, 0)) { sum, feed in
            let next = feed.statistics
            return (sum.0 + next.clients, sum.1 + next.keys, sum.2 + next.invalidationsSent)
        }
    }
}
