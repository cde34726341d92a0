import CLibevent
import ProfileModel

/// What a connection's front keeps between its requests (a RESP connection's protocol
/// version, transaction and tracking), and what the connection must know of it.
///
/// Owned by its connection (the line protocol's, which keeps nothing, is shared), and used by
/// the worker thread that holds the connection. A connection that moves to another worker
/// keeps its session.
package protocol FrontSession: AnyObject {
    /// The most received bytes the front needs to hold to answer: its longest request.
    var inputLimit: Int { get }
    /// What the session holds between requests beyond the connection's buffers (a queued
    /// transaction), counted in the clients' memory.
    var heldBytes: Int { get }
    /// The connection is now on `worker`'s loop: opened, or moved there from another worker.
    func attached(_ connection: Connection, to worker: Worker)
    /// The connection is being handed to another worker, which calls `attached` once it has it.
    func leaving()
    /// Drops what it holds: the connection closed.
    func release()
}

/// What a front keeps of a reply it makes as the client reads (an MGET's ids left to answer):
/// the connection holds it, and counts it in the clients' memory.
///
/// Owned by its connection; the worker thread that holds the connection.
@usableFromInline package protocol UnfinishedReply: AnyObject {
    /// What it holds, for the clients' memory.
    var byteCount: Int { get }
    /// Whether nothing queued on the connection may be sent yet: the front must still learn
    /// whether the reply can be made whole (an MGET's ids read from the store first), and
    /// would otherwise replace it, which only works while none of it has left.
    var holdsReply: Bool { get }
}

/// One client connection, from accept to close.
///
/// Owned and used only by the worker thread it was handed to, which may hand it to another
/// worker between requests (through that worker's inbox); the writer thread holds references
/// to connections with writes in flight, which never move, and never touches their state.
public final class Connection {
    /// Where a connection is in its life. memcached keeps these in one enum; so do we.
    @usableFromInline package enum Phase {
        /// Reading and answering requests.
        case serving
        /// QUIT or TOOLONG was answered, or the server is stopping: nothing more is read;
        /// the connection closes once its replies are sent.
        case closing
        /// Closed; the socket and events are released.
        case closed
    }

    /// The transport's socket, which names the connection in the log and to the event loop.
    package let fd: Int32
    /// How bytes cross the socket, in clear or through TLS: every read, send, peek, handshake
    /// step and the close go through it.
    package let transport: Transport
    /// Which front serves it: its index in `ServerFronts.all` and in `Worker.fronts`.
    package let frontIndex: Int
    /// What the connection's front keeps between requests.
    package let session: any FrontSession
    package unowned var worker: Worker
    @usableFromInline package var phase = Phase.serving
    /// `phase == .serving`, which the fronts' serve loops test before every request: a
    /// comparison that inlines across modules, where `==` goes through Equatable's witness.
    @inlinable public var isServing: Bool {
        if case .serving = phase { return true }
        return false
    }
    @usableFromInline package var role: Role
    /// Writes sent to the writer and not answered yet. While there are any, only more writes,
    /// and reads that can be answered ahead of them (`heldReplies`), are taken from the input,
    /// so replies keep request order.
    @inlinable public var writesInFlight: Int { unansweredWrites.count }
    /// The writes in flight, oldest first: what reads taken ahead of them must not touch.
    @usableFromInline package var unansweredWrites: [WriteJob] = []
    /// Writes taken from the input since the connection opened.
    package var writesTaken = 0
    /// Writes whose answers were written since the connection opened: what releases
    /// `heldReplies`.
    package var writesAnswered: Int { writesTaken - unansweredWrites.count - writeAnswersWaiting }
    /// Writes committed whose answers wait in `answersWaiting`.
    package var writeAnswersWaiting = 0
    /// Replies to reads answered ahead of writes in flight, each waiting for those writes' replies.
    package var heldReplies = HeldReplies()
    /// Reads sent to the fetchers (a shared store's) and not answered yet. While there are
    /// any, only more such reads are taken from the input.
    @usableFromInline package var readsInFlight = 0
    /// Requests of this connection that another thread is working on.
    @inlinable public var jobsInFlight: Int { writesInFlight + readsInFlight }
    /// A reply of many parts made as far as the high-water mark, whose front makes the rest as
    /// the client reads (`Worker.continueReplies`); no later request is served before it ends.
    @usableFromInline package var unfinishedReply: (any UnfinishedReply)? = nil
    /// Answers of the connection's jobs that came back while its unfinished reply was being
    /// made: written after it, in order (`Worker.continueReplies`). Their jobs are no longer
    /// in flight.
    package var answersWaiting: [(Worker) -> Void] = []
    /// The peer shut down its sending side: answer what arrived, then close.
    package var peerClosed = false

    /// Received bytes not yet handled, at most the session's input limit.
    var pending: PendingInput
    /// The last pass over the input stopped for want of bytes: what is pending is the start
    /// of a request, not a whole one left for later.
    @usableFromInline package var needsMoreInput = false

    /// The transport's handshake has not finished: nothing is read as requests yet.
    package var handshaking: Bool
    /// Closes the connection if its handshake has not finished by `--tls-handshake-timeout`.
    package var handshakeTimer: OpaquePointer? = nil
    /// The transport's last read, peek or handshake step must send before it can go on (TLS):
    /// the socket's writability, not its readability, moves it on.
    package var waitsForWritable = false

    /// Reply bytes the transport has not sent yet (plaintext, on a TLS connection).
    @usableFromInline package let output: OpaquePointer
    /// What this connection counts in the clients' memory (`ServerStatistics.clientMemoryBytes`)
    /// since it last accounted.
    package var accountedBytes = 0
    package var readEvent: OpaquePointer? = nil
    package var writeEvent: OpaquePointer? = nil
    /// Brings the connection back to work it already has (input left unserved, a paused
    /// reply), at the loop's lower priority (`Worker.resumePriority`).
    package var resumeEvent: OpaquePointer? = nil
    /// Brings it back at normal priority should fresh work keep the loop busy
    /// (`Worker.resumeBackstopMicroseconds`).
    package var resumeBackstop: OpaquePointer? = nil
    /// `Worker.resumesRun` when its resume was last queued.
    package var resumesRunWhenQueued = 0
    package var reading = false
    package var writing = false
    /// Lets other threads send the connection's pushes straight to its socket between passes
    /// (`PushOutlet`); made when it first needs pushes (`makePushOutlet`).
    package private(set) var pushOutlet: PushOutlet?
    /// Bytes a front wrote that go out again once every read taken before them is answered
    /// (`repeatOnceReadsAreAnswered`).
    package private(set) var repeatedOnceReadsAreAnswered: [UInt8] = []

    package init(transport: Transport, frontIndex: Int, session: any FrontSession, worker: Worker, role: Role) {
        fd = transport.fd
        self.transport = transport
        self.frontIndex = frontIndex
        self.session = session
        handshaking = transport.needsHandshake
        self.worker = worker
        self.role = role
        pending = PendingInput(limit: session.inputLimit)
        output = evbuffer_new()
    }

    deinit {
        evbuffer_free(output)
    }

    @inlinable public var queuedOutput: Int { evbuffer_get_length(output) }

    /// What the connection holds now: input kept, unsent replies, replies held for order, an
    /// unfinished reply's state, what the session holds (a RESP transaction's queue) and what
    /// the transport holds (OpenSSL's buffers).
    package var memoryBytes: Int {
        pending.capacity + queuedOutput + heldReplies.byteCount + (unfinishedReply?.byteCount ?? 0)
            + repeatedOnceReadsAreAnswered.count + session.heldBytes + transport.heldBytes
    }

    /// Whether a pass has something to serve without more input: an unfinished reply, pending
    /// input that holds a request, not only the start of one, or input the transport holds.
    package var hasWorkWaiting: Bool {
        unfinishedReply != nil || (!pending.isEmpty && !needsMoreInput) || transport.hasBufferedInput
    }

    /// Whether its queued replies must wait (`UnfinishedReply.holdsReply`).
    package var repliesHeldBack: Bool { unfinishedReply?.holdsReply ?? false }

    /// Drops the queued reply bytes after the first `count`, for a reply taken back unsent.
    package func dropQueuedOutput(after count: Int) {
        // libevent cannot cut a buffer's tail: move the head aside, empty it, and move it back.
        let kept = evbuffer_new()
        evbuffer_remove_buffer(output, kept, count)
        evbuffer_drain(output, evbuffer_get_length(output))
        evbuffer_add_buffer(output, kept)
        evbuffer_free(kept)
    }

    /// Frees the events, which belong to the worker's event_base.
    package func detachEvents() {
        if let readEvent { event_free(readEvent) }
        if let writeEvent { event_free(writeEvent) }
        if let resumeEvent { event_free(resumeEvent) }
        if let resumeBackstop { event_free(resumeBackstop) }
        if let handshakeTimer { event_free(handshakeTimer) }
        readEvent = nil
        writeEvent = nil
        resumeEvent = nil
        resumeBackstop = nil
        handshakeTimer = nil
        reading = false
        writing = false
    }

    /// The connection's `PushOutlet`, made on first use; nil on a TLS connection, whose
    /// session only its worker may use. The worker's thread.
    package func makePushOutlet() -> PushOutlet? {
        guard case .plain = transport else { return nil }
        if pushOutlet == nil { pushOutlet = PushOutlet(fd: fd) }
        return pushOutlet
    }

    /// Shuts its `PushOutlet`, if it has one, before the worker reads for it or sends on it;
    /// what the socket did not take of a push goes first in its output.
    @inline(__always) package func shutPushOutlet() {
        pushOutlet?.shut(queueingRestIn: output)
    }

    /// Reads whose replies are still to be written: fetches in flight, replies held behind writes.
    package var hasReadsUnanswered: Bool { readsInFlight > 0 || !heldReplies.isEmpty }

    /// Has `bytes`, just written, written again after the replies of the reads unanswered now,
    /// in the pass that writes the last of them (`Worker.finishPass`). An invalidation push may
    /// not wait for those replies (a client may cache the key from an earlier read), yet one of
    /// them may carry a value read before the change: the push, repeated after it, drops that.
    package func repeatOnceReadsAreAnswered(_ bytes: UnsafeRawBufferPointer) {
        repeatedOnceReadsAreAnswered.append(contentsOf: bytes)
    }

    /// Takes the bytes to repeat once no read is unanswered.
    package func takeRepeatedBytes() -> [UInt8] {
        defer { repeatedOnceReadsAreAnswered = [] }
        return repeatedOnceReadsAreAnswered
    }

    /// Nothing of its own to send or to make, nor anything in flight: its `PushOutlet` may open.
    var isQuiet: Bool {
        phase == .serving && !handshaking && queuedOutput == 0 && jobsInFlight == 0 && unfinishedReply == nil
            && answersWaiting.isEmpty && heldReplies.isEmpty
    }

    /// Releases the socket and its events. The object lives on while write jobs still reference it.
    package func releaseResources() {
        pushOutlet?.retire()
        detachEvents()
        transport.close()
        phase = .closed
        pending.release()
        heldReplies.removeAll()
        unfinishedReply = nil
        answersWaiting.removeAll()
        repeatedOnceReadsAreAnswered = []
        evbuffer_drain(output, evbuffer_get_length(output))
        session.release()
    }
}
