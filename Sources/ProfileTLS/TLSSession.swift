import COpenSSL
import Glibc

/// What one call on a non-blocking session did.
///
/// A plain value; any thread may use it.
public enum TLSResult: Equatable, Sendable {
    /// This many plaintext bytes were read or written (for a handshake: it is done).
    case done(Int)
    /// Call again once the socket is readable.
    case wantRead
    /// Call again once the socket is writable.
    case wantWrite
    /// The peer ended the stream (close_notify, or an end of stream without one).
    case closed
    /// The session cannot go on; the reason is one line for the log.
    case failed(String)
}

/// One TLS connection over a socket the caller owns: its OpenSSL session, freed with it.
///
/// Used by one thread at a time (a worker moving a connection hands it over whole).
///
/// OpenSSL reads its thread's error queue to say why a call failed, so the queue must be
/// empty before each call. Clearing it costs about a hundred instructions a request, so the
/// reads and writes do not: every call here that can leave errors behind (a failure, the
/// handshake, the peer's name) takes them all before it returns.
public final class TLSSession {
    private let ssl: OpaquePointer

    init(ssl: OpaquePointer) { self.ssl = ssl }

    deinit { SSL_free(ssl) }

    /// Moves the handshake on; `.done(0)` once it is complete.
    public func handshake() -> TLSResult {
        ERR_clear_error()
        errno = 0
        let n = SSL_do_handshake(ssl)
        guard n == 1 else { return outcome(of: n) }
        // Nothing a finished handshake noted may reach the reads and writes after it.
        ERR_clear_error()
        return .done(0)
    }

    /// Reads up to `count` plaintext bytes.
    public func read(into buffer: UnsafeMutableRawPointer, count: Int) -> TLSResult {
        errno = 0
        let n = SSL_read(ssl, buffer, Int32(clamping: count))
        return n > 0 ? .done(Int(n)) : outcome(of: n)
    }

    /// Whether a plaintext byte can be read now, without taking it: `.done(1)` if so.
    public func peekByte() -> TLSResult {
        var byte: UInt8 = 0
        errno = 0
        let n = SSL_peek(ssl, &byte, 1)
        return n > 0 ? .done(Int(n)) : outcome(of: n)
    }

    /// Writes up to `count` bytes; after `.wantRead` or `.wantWrite`, call again with the same
    /// bytes first (they may have moved) and at least as many of them.
    public func write(_ bytes: UnsafeRawPointer, count: Int) -> TLSResult {
        guard count > 0 else { return .done(0) }
        errno = 0
        let n = SSL_write(ssl, bytes, Int32(clamping: count))
        return n > 0 ? .done(Int(n)) : outcome(of: n)
    }

    /// `read` as recv(2) reports it, for callers written for sockets: the bytes read, 0 at
    /// the end of the stream, or -1 with errno EAGAIN (try again once the socket is ready)
    /// or ECONNRESET (the session failed).
    public func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> Int {
        switch read(into: buffer, count: count) {
        case .done(let n): return n
        case .closed: return 0
        case .wantRead, .wantWrite: errno = EAGAIN
        case .failed: errno = ECONNRESET
        }
        return -1
    }

    /// `write` as send(2) reports it: the bytes written, or -1 with errno EAGAIN (offer the
    /// same bytes again once the socket is ready), EPIPE (the peer ended the stream) or
    /// ECONNRESET (the session failed).
    public func send(_ bytes: UnsafeRawPointer, count: Int) -> Int {
        switch write(bytes, count: count) {
        case .done(let n): return n
        case .wantRead, .wantWrite: errno = EAGAIN
        case .closed: errno = EPIPE
        case .failed: errno = ECONNRESET
        }
        return -1
    }

    /// Decrypted bytes OpenSSL holds that the socket will not signal again.
    public var hasBufferedInput: Bool { SSL_pending(ssl) > 0 }

    /// Sends close_notify if the socket takes it now; never waits for the peer's.
    public func shutdown() {
        ERR_clear_error()
        if SSL_is_init_finished(ssl) == 1 { _ = SSL_shutdown(ssl) }
        ERR_clear_error()
    }

    /// The negotiated version, as OpenSSL names it ("TLSv1.3").
    public var version: String { String(cString: SSL_get_version(ssl)) }

    /// The common name in the subject of the certificate the peer sent and OpenSSL verified;
    /// nil without one.
    public var verifiedPeerCommonName: String? {
        defer { ERR_clear_error() }
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(certificate) }
        guard SSL_get_verify_result(ssl) == X509_V_OK, let subject = X509_get_subject_name(certificate) else { return nil }
        var buffer = [CChar](repeating: 0, count: 256)
        let n = X509_NAME_get_text_by_NID(subject, NID_commonName, &buffer, Int32(buffer.count))
        guard n > 0 else { return nil }
        return string(fromTerminated: buffer)
    }

    /// What a call that returned `n` did; empties the error queue whatever it was.
    private func outcome(of n: Int32) -> TLSResult {
        let code = SSL_get_error(ssl, n)
        switch code {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            ERR_clear_error()
            return .closed
        case SSL_ERROR_SYSCALL:
            let reasons = takeErrorQueue()
            if !reasons.isEmpty { return .failed(reasons) }
            // 0: the socket ended; -1: the socket call failed and errno (cleared before the
            // call) says why.
            if n == 0 || errno == 0 { return .closed }
            return .failed(String(cString: strerror(errno)))
        default:
            let reasons = takeErrorQueue()
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK, let text = X509_verify_cert_error_string(Int(verify)) {
                return .failed("\(reasons.isEmpty ? "handshake failed" : reasons) (\(String(cString: text)))")
            }
            return .failed(reasons.isEmpty ? "TLS error \(code)" : reasons)
        }
    }
}
