import Synchronization

/// The notices a commit's changes made for other connections that must hear of them before
/// the commit is acknowledged (RESP's invalidation pushes to client caches): counted as the
/// change feeds make them, marked sent as they reach their connections' sockets (straight from
/// the committing thread through a quiet connection's `PushOutlet`, else from the worker that
/// holds the connection) or are dropped with a closed connection, and waited for by the worker
/// that answers the commit's writes. A client that got a write's reply then never reads the old value from a
/// client cache that was to be told of the change: the push is on that cache's socket first.
///
/// Thread-safe: the writer makes it, change feeds count into it, any worker marks notices
/// sent, and the worker answering the writes waits for it (`allSent(waking:for:)`).
public final class ChangeNotices: @unchecked Sendable {
    /// Guards the two fields below; a futex, held for a few instructions.
    private let lock = Mutex(())
    /// Notices not sent yet, and one for the writer while it is still telling the feeds.
    private var pending = 1
    /// Who waits for the last one: the workers to wake, for the connections to go on with
    /// (every job the commit committed shares these notices).
    private var waiters: [(worker: Worker, connection: Connection)] = []

    package init() {}

    /// One more notice to wait for; counted before anyone can send it.
    package func expect() {
        lock.withLock { _ in pending += 1 }
    }

    /// A notice was handed to its connection's socket, or dropped with its connection (and,
    /// once, the writer has told every feed); the last one wakes the waiting worker.
    package func sent() {
        let wake = lock.withLock { _ -> [(worker: Worker, connection: Connection)] in
            pending -= 1
            guard pending == 0 else { return [] }
            defer { waiters = [] }
            return waiters
        }
        for waiter in wake { waiter.worker.post(.deliver(NoticesSent(waiter.connection))) }
    }

    /// Whether every notice was sent; when not, `worker` is woken for `connection` once they are.
    func allSent(waking worker: Worker, for connection: Connection) -> Bool {
        lock.withLock { _ in
            if pending == 0 { return true }
            if !waiters.contains(where: { $0.connection === connection }) { waiters.append((worker, connection)) }
            return false
        }
    }
}

/// A connection's write answer waiting for its commit's notices (`ChangeNotices`): nothing
/// after it is written, or served, until they are sent.
///
/// Owned by its connection; the worker thread that holds the connection.
final class AwaitedNotices: UnfinishedReply {
    let notices: ChangeNotices

    init(_ notices: ChangeNotices) {
        self.notices = notices
    }

    var byteCount: Int { 0 }
    var holdsReply: Bool { false }
}

/// Wakes the worker whose connection waited for a commit's notices.
final class NoticesSent: WorkerDelivery {
    let connection: Connection

    init(_ connection: Connection) {
        self.connection = connection
    }

    func deliver(on worker: Worker) {
        worker.goOn(with: connection)
    }
}
