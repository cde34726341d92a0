import CLibevent
import Glibc
import ProfileProtocol

/// The protocol a listener speaks, and so every connection it accepted.
///
/// A plain value; any thread may use it.
enum Front: Sendable {
    /// The line protocol (docs/PROTOCOL.md).
    case line
    /// RESP, profiles as Redis hashes (docs/RESP.md).
    case resp
}

/// One client connection, from accept to close.
///
/// Owned and used only by the worker thread it was handed to, which may hand it to another
/// worker between requests (through that worker's inbox); the writer thread holds references
/// to connections with writes in flight, which never move, and never touches their state.
final class Connection {
    /// Where a connection is in its life. memcached keeps these in one enum; so do we.
    enum Phase {
        /// Reading and answering requests.
        case serving
        /// QUIT or TOOLONG was answered, or the server is stopping: nothing more is read;
        /// the connection closes once its replies are sent.
        case closing
        /// Closed; the socket and events are released.
        case closed
    }

    let fd: Int32
    let front: Front
    /// RESP's state between requests; nil on a line-protocol connection.
    let resp: RESPSession?
    unowned var worker: Worker
    var phase = Phase.serving
    var role: Role
    /// Writes sent to the writer and not answered yet. While there are any, only more writes
    /// are taken from the input, so replies keep request order.
    var writesInFlight = 0
    /// Reads sent to the fetchers (a shared store's) and not answered yet. While there are
    /// any, only more such reads are taken from the input.
    var readsInFlight = 0
    /// Requests of this connection that another thread is working on.
    var jobsInFlight: Int { writesInFlight + readsInFlight }
    /// The peer shut down its sending side: answer what arrived, then close.
    var peerClosed = false

    /// Received bytes not yet handled (a partial request, or requests left while paused); at
    /// most `inputLimit`. Allocated as needed and grown toward that limit, so an idle
    /// connection holds none.
    var pending: UnsafeMutableRawPointer? = nil
    var pendingCount = 0
    private var pendingCapacity = 0
    /// The most unhandled bytes the front ever needs to hold to answer: a line protocol line
    /// (`--max-line`), or RESP's largest request with its framing.
    let inputLimit: Int
    /// The last pass over the input stopped for want of bytes: what is pending is the start
    /// of a request, not a whole one left for later.
    var needsMoreInput = false

    /// Reply bytes the socket has not taken yet.
    let output: OpaquePointer
    var readEvent: OpaquePointer? = nil
    var writeEvent: OpaquePointer? = nil
    var reading = false
    var writing = false

    init(fd: Int32, front: Front, worker: Worker, role: Role, inputLimit: Int, respSessionId: Int) {
        self.fd = fd
        self.front = front
        resp = front == .resp ? RESPSession(id: respSessionId) : nil
        self.worker = worker
        self.role = role
        self.inputLimit = inputLimit
        output = evbuffer_new()
    }

    deinit {
        evbuffer_free(output)
        pending?.deallocate()
    }

    var queuedOutput: Int { evbuffer_get_length(output) }

    /// Drops the queued reply bytes after the first `count`, for a reply taken back unsent.
    func dropQueuedOutput(after count: Int) {
        // libevent cannot cut a buffer's tail: move the head aside, empty it, and move it back.
        let kept = evbuffer_new()
        evbuffer_remove_buffer(output, kept, count)
        evbuffer_drain(output, evbuffer_get_length(output))
        evbuffer_add_buffer(output, kept)
        evbuffer_free(kept)
    }

    /// Keeps `count` unhandled bytes for the next pass, after any already kept.
    func keepPending(_ bytes: UnsafeRawPointer, count: Int) {
        precondition(pendingCount + count <= inputLimit, "more unhandled input than the front may hold")
        reservePending(pendingCount + count)
        (pending! + pendingCount).copyMemory(from: bytes, byteCount: count)
        pendingCount += count
    }

    /// Room for more input after what is pending: at least 64 KiB, or what is left below
    /// `inputLimit` when that is less (0 once the limit is reached).
    func pendingRoom() -> UnsafeMutableRawBufferPointer {
        let wanted = min(inputLimit, pendingCount + 65536)
        reservePending(wanted)
        return UnsafeMutableRawBufferPointer(start: pending! + pendingCount, count: max(0, wanted - pendingCount))
    }

    /// Grows the buffer to hold `count` bytes, doubling, up to `inputLimit`.
    private func reservePending(_ count: Int) {
        guard count > pendingCapacity || pending == nil else { return }
        let capacity = min(inputLimit, max(count, min(inputLimit, max(65536, 2 * pendingCapacity))))
        let grown = UnsafeMutableRawPointer.allocate(byteCount: max(capacity, 1), alignment: 16)
        if let pending {
            grown.copyMemory(from: pending, byteCount: pendingCount)
            pending.deallocate()
        }
        pending = grown
        pendingCapacity = capacity
    }

    /// Drops the first `count` pending bytes; frees the buffer once empty so idle connections stay small.
    func consumePending(_ count: Int) {
        guard count > 0 else { return }
        pendingCount -= count
        if pendingCount == 0 {
            pending?.deallocate()
            pending = nil
            pendingCapacity = 0
        } else {
            pending!.copyMemory(from: pending! + count, byteCount: pendingCount)
        }
    }

    /// Frees the events, which belong to the worker's event_base.
    func detachEvents() {
        if let readEvent { event_free(readEvent) }
        if let writeEvent { event_free(writeEvent) }
        readEvent = nil
        writeEvent = nil
        reading = false
        writing = false
    }

    /// Releases the socket and its events. The object lives on while write jobs still reference it.
    func releaseResources() {
        detachEvents()
        close(fd)
        phase = .closed
        pending?.deallocate()
        pending = nil
        pendingCount = 0
        pendingCapacity = 0
    }
}
