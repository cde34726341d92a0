import CLibevent
import Glibc
import ProfileTLS

/// What one step of a transport did: a receive, a send, a peek or a handshake step.
///
/// A plain value; any thread may use it.
package enum TransportResult {
    /// This many bytes were received or sent, or (a peek) have arrived; a handshake step's
    /// `done(0)`: the handshake is complete.
    case done(Int)
    /// The peer ended its stream.
    case endOfStream
    /// Nothing can move now: wait until the socket is readable (a receive, a peek or a
    /// handshake step) or writable (a send).
    case wouldBlock
    /// TLS must send before it can read on: wait until the socket is writable.
    case waitsForWritable
    /// The connection cannot go on.
    case failed
}

/// How a connection's bytes cross its socket: in clear or through TLS, as Redis's connection
/// types do. The worker, the connection and the fronts read, send, peek, shake hands and close
/// only through it, so none of them asks which one a connection has.
///
/// A switch over the two, not a protocol's witness table: a plain connection's receive and
/// send are then a branch and the system call, with OpenSSL's code out of line, and cost what
/// they did before there was a choice.
///
/// Made by the acceptor thread, then used only by the worker thread that holds its connection
/// (a connection that moves takes it along).
package enum Transport {
    case plain(PlainTransport)
    case tls(TLSTransport)

    /// The socket, which the transport owns and closes.
    package var fd: Int32 {
        switch self {
        case .plain(let plain): plain.fd
        case .tls(let tls): tls.fd
        }
    }

    /// Whether a handshake must finish before the connection carries requests.
    package var needsHandshake: Bool {
        switch self {
        case .plain(let plain): plain.needsHandshake
        case .tls(let tls): tls.needsHandshake
        }
    }

    /// What the transport holds for its own use, counted in the clients' memory.
    package var heldBytes: Int {
        switch self {
        case .plain(let plain): plain.heldBytes
        case .tls(let tls): tls.heldBytes
        }
    }

    /// Received bytes the transport holds that the socket will not signal again.
    package var hasBufferedInput: Bool {
        switch self {
        case .plain(let plain): plain.hasBufferedInput
        case .tls(let tls): tls.hasBufferedInput
        }
    }

    /// The common name of the certificate the peer sent and the handshake verified; nil
    /// without one.
    package var verifiedPeerCommonName: String? {
        switch self {
        case .plain(let plain): plain.verifiedPeerCommonName
        case .tls(let tls): tls.verifiedPeerCommonName
        }
    }

    /// Moves the handshake on as far as the socket lets it; `done(0)` once it is complete.
    package func handshake() -> TransportResult {
        switch self {
        case .plain(let plain): plain.handshake()
        case .tls(let tls): tls.handshake()
        }
    }

    /// Receives up to `count` bytes into `buffer`.
    package func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransportResult {
        switch self {
        case .plain(let plain): plain.receive(into: buffer, count: count)
        case .tls(let tls): tls.receive(into: buffer, count: count)
        }
    }

    /// Sends as many of `count` bytes as the socket takes now: `done` with how many, or
    /// `wouldBlock` when it takes none. What is left goes to the connection's queue, which
    /// `sendQueued` offers first from then on.
    package func send(_ bytes: UnsafeRawPointer, count: Int) -> TransportResult {
        switch self {
        case .plain(let plain): plain.send(bytes, count: count)
        case .tls(let tls): tls.send(bytes, count: count)
        }
    }

    /// Sends the connection's queued replies (an evbuffer) until the socket takes no more,
    /// draining what it took; false when the connection failed.
    package func sendQueued(_ output: OpaquePointer) -> Bool {
        switch self {
        case .plain(let plain): plain.sendQueued(output)
        case .tls(let tls): tls.sendQueued(output)
        }
    }

    /// Whether a byte has arrived, without taking it: `done(1)` if so.
    package func peekByte() -> TransportResult {
        switch self {
        case .plain(let plain): plain.peekByte()
        case .tls(let tls): tls.peekByte()
        }
    }

    /// Ends the session (TLS: close_notify if the socket takes it now) and closes the socket.
    package func close() {
        switch self {
        case .plain(let plain): plain.close()
        case .tls(let tls): tls.close()
        }
    }
}

/// A socket in clear: each operation is the system call itself.
///
/// A plain value; used only by the worker thread that holds its connection.
package struct PlainTransport {
    package let fd: Int32

    package var needsHandshake: Bool { false }
    package var heldBytes: Int { 0 }
    package var hasBufferedInput: Bool { false }
    package var verifiedPeerCommonName: String? { nil }

    package func handshake() -> TransportResult { .done(0) }

    package func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransportResult {
        let n = recv(fd, buffer, count, 0)
        if n > 0 { return .done(n) }
        return n == 0 ? .endOfStream : Self.blockedOrFailed()
    }

    package func send(_ bytes: UnsafeRawPointer, count: Int) -> TransportResult {
        let n = Glibc.send(fd, bytes, count, Int32(MSG_NOSIGNAL))
        return n >= 0 ? .done(n) : Self.blockedOrFailed()
    }

    package func sendQueued(_ output: OpaquePointer) -> Bool {
        evbuffer_write(output, fd) >= 0 || errno == EAGAIN || errno == EINTR
    }

    package func peekByte() -> TransportResult {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK))
        if n > 0 { return .done(n) }
        return n == 0 ? .endOfStream : Self.blockedOrFailed()
    }

    package func close() { Glibc.close(fd) }

    /// What a socket call that returned -1 means: nothing to move now, or a failure.
    private static func blockedOrFailed() -> TransportResult {
        errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? .wouldBlock : .failed
    }
}

/// A socket through a TLS session: plaintext to and from the connection, records on the wire.
///
/// Made by the acceptor thread, then used only by the worker thread that holds its connection.
package final class TLSTransport {
    package let fd: Int32
    /// Dropped at close, so that OpenSSL's buffers go with the socket, not with the last write
    /// job that still holds the connection.
    private var session: TLSSession?

    package init(fd: Int32, session: TLSSession) {
        self.fd = fd
        self.session = session
    }

    package var needsHandshake: Bool { true }
    /// OpenSSL's: a record buffer each way of 16 KiB plus its header and padding, and the session.
    package var heldBytes: Int { 40 << 10 }
    // The hot three stay out of line, so that `Transport`'s switch inlines into the worker with
    // only the plain path's code, and its callers save no registers for OpenSSL's.
    @inline(never) package var hasBufferedInput: Bool { session?.hasBufferedInput ?? false }
    package var verifiedPeerCommonName: String? { session?.verifiedPeerCommonName }

    /// Why handshakes failed, for the operator: a client with the wrong CA, no certificate
    /// where one is required, or plain text on a TLS port says so here, at most once a second.
    static let handshakeFailures = RateLimitedLog()

    /// What one write offers: a full record's worth of plaintext.
    package static let writeChunk = 16 << 10

    package func handshake() -> TransportResult {
        guard let session else { return .failed }
        let step = session.handshake()
        if case .failed(let reason) = step {
            Self.handshakeFailures.warn("TLS handshake failed", [(key: "peer", value: peerAddress(of: fd)), (key: "reason", value: reason)])
        }
        return Self.readOutcome(step)
    }

    @inline(never) package func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransportResult {
        guard let session else { return .failed }
        let read = session.read(into: buffer, count: count)
        if Log.level <= .debug, case .failed(let reason) = read { Log.debug("TLS read failed", ["reason": reason]) }
        return Self.readOutcome(read)
    }

    /// Writes a record at a time. OpenSSL wants a write retried after wantWrite with the same
    /// bytes first: the caller queues what is left, and `sendQueued` offers it from there.
    @inline(never) package func send(_ bytes: UnsafeRawPointer, count: Int) -> TransportResult {
        guard let session else { return .failed }
        var sent = 0
        while sent < count {
            switch session.write(bytes + sent, count: count - sent) {
            case .done(let n): sent += n
            case .wantRead, .wantWrite: return sent > 0 ? .done(sent) : .wouldBlock
            case .closed, .failed: return .failed
            }
        }
        return .done(sent)
    }

    package func sendQueued(_ output: OpaquePointer) -> Bool {
        guard let session else { return false }
        while true {
            let queued = evbuffer_get_length(output)
            guard queued > 0 else { return true }
            // The queue only grows at its end, so a retry after wantWrite offers the same bytes
            // first and at least as many of them, as OpenSSL requires.
            let count = min(queued, Self.writeChunk)
            guard let bytes = evbuffer_pullup(output, count) else { return false }
            switch session.write(bytes, count: count) {
            case .done(let n): evbuffer_drain(output, n)
            case .wantRead, .wantWrite: return true
            case .closed: return false
            case .failed(let reason):
                if Log.level <= .debug { Log.debug("TLS write failed", ["reason": reason]) }
                return false
            }
        }
    }

    package func peekByte() -> TransportResult {
        guard let session else { return .failed }
        return Self.readOutcome(session.peekByte())
    }

    package func close() {
        session?.shutdown()
        session = nil
        Glibc.close(fd)
    }

    /// What a read, a peek or a handshake step means to the connection.
    private static func readOutcome(_ result: TLSResult) -> TransportResult {
        switch result {
        case .done(let n): .done(n)
        case .closed: .endOfStream
        case .wantRead: .wouldBlock
        case .wantWrite: .waitsForWritable
        case .failed: .failed
        }
    }
}
