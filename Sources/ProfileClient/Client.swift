import Glibc
import ProfileProtocol
import ProfileTLS
import UnixSocketAddress

/// Where a profiled listens. A plain value; any thread may use it.
public enum Endpoint: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: UInt16)
    case unix(path: String)

    public var description: String {
        switch self {
        case .tcp(let host, let port): "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }
}

/// One profile as a client sees it. A plain value; any thread may use it.
public struct Profile: Sendable, Equatable, Hashable {
    public var userId: [UInt8]
    public var name: [UInt8]
    public var portraitUri: [UInt8]

    public init(userId: [UInt8], name: [UInt8], portraitUri: [UInt8]) {
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }

    public init(userId: String, name: String, portraitUri: String) {
        self.init(userId: Array(userId.utf8), name: Array(name.utf8), portraitUri: Array(portraitUri.utf8))
    }
}

/// What went wrong talking to a server. A plain value; any thread may use it.
public enum ClientError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The connection could not be made.
    case connect(endpoint: String, reason: String)
    /// A read or write failed, or the server closed the connection.
    case io(String)
    /// The server answered `ERROR <code> <message>`.
    case server(code: String, message: String)
    /// The server answered something the protocol does not allow here.
    case unexpectedReply(String)
    /// The client's TLS files cannot be used (a CA, certificate or key that cannot be read).
    case tls(String)

    public var description: String {
        switch self {
        case .connect(let endpoint, let reason): "cannot connect to \(endpoint): \(reason)"
        case .io(let reason): reason
        case .server(let code, let message): "ERROR \(code) \(message)"
        case .unexpectedReply(let line): "unexpected reply: \(line)"
        case .tls(let reason): reason
        }
    }
}

/// How a client speaks TLS, with redis-cli's names: the CA that the server's certificate
/// must chain to (the system's CAs when nil), and the client's own certificate and key for a
/// server that asks for one.
///
/// A plain value; any thread may use it.
public struct TLSClientOptions: Sendable, Equatable {
    public var caCertificateFile: String?
    public var certificateFile: String?
    public var keyFile: String?
    /// The name the server's certificate must carry; nil: the host connected to.
    public var serverName: String?
    /// False skips checking the server's certificate (redis-cli's `--insecure`).
    public var verifyPeer: Bool

    public init(caCertificateFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil,
                serverName: String? = nil, verifyPeer: Bool = true) {
        self.caCertificateFile = caCertificateFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.serverName = serverName
        self.verifyPeer = verifyPeer
    }

    /// A context for these options: the CA, certificate and key files read now.
    public func makeContext() throws(ClientError) -> TLSContext {
        do {
            return try TLSContext(clientCA: caCertificateFile, certificateFile: certificateFile, keyFile: keyFile,
                                  verifyPeer: verifyPeer)
        } catch {
            throw ClientError.tls(error.description)
        }
    }

    /// The options a command line's TLS flags give, with redis-cli's names (`--tls`,
    /// `--cacert`, `--cert`, `--key`, `--sni`, `--insecure`), as profilectl and profilebench
    /// take them: nil without `--tls`.
    ///
    /// - Throws: one sentence for a TLS flag without `--tls`, or a certificate without its key.
    public static func fromFlags(tls: Bool, caCertificate: String?, certificate: String?, key: String?,
                                 serverName: String?, insecure: Bool) throws(TLSFlagProblem) -> TLSClientOptions? {
        let given = [("--cacert", caCertificate != nil), ("--cert", certificate != nil), ("--key", key != nil),
                     ("--sni", serverName != nil), ("--insecure", insecure)]
        if !tls, let flag = given.first(where: { $0.1 })?.0 { throw TLSFlagProblem(message: "\(flag) sets up TLS: add --tls") }
        if (certificate == nil) != (key == nil) { throw TLSFlagProblem(message: "a client certificate needs both --cert and --key") }
        guard tls else { return nil }
        return TLSClientOptions(caCertificateFile: caCertificate, certificateFile: certificate, keyFile: key,
                                serverName: serverName, verifyPeer: !insecure)
    }
}

/// A command line's TLS flags that do not fit together: one sentence for the user.
///
/// A plain value; any thread may use it.
public struct TLSFlagProblem: Error, Sendable {
    public var message: String
}

/// Starts TLS over a connected blocking socket: the handshake, bounded by the socket's timeouts.
/// The caller keeps owning `fd`.
public func startTLS(on fd: Int32, to endpoint: Endpoint, context: TLSContext, serverName: String?) throws(ClientError) -> TLSSession {
    // OpenSSL writes with write(2), which raises SIGPIPE on a connection the server closed;
    // the error is reported instead, as the clear path's MSG_NOSIGNAL does. A handler the
    // program set stays.
    var current = sigaction()
    if sigaction(SIGPIPE, nil, &current) == 0 && current.__sigaction_handler.sa_handler == nil {
        signal(SIGPIPE, SIG_IGN)
    }
    var name = serverName
    if name == nil, case .tcp(let host, _) = endpoint { name = host }
    guard let session = context.session(fd: fd, accepting: false, serverName: name) else {
        throw ClientError.connect(endpoint: endpoint.description, reason: "cannot start a TLS session")
    }
    while true {
        // A failure is retried only when the socket call was interrupted, so errno must be
        // this call's.
        errno = 0
        switch session.handshake() {
        case .done: return session
        case .wantRead, .wantWrite:
            throw ClientError.connect(endpoint: endpoint.description, reason: "timed out in the TLS handshake")
        case .closed:
            throw ClientError.connect(endpoint: endpoint.description, reason: "the server closed the connection in the TLS handshake")
        case .failed(let reason):
            if errno == EINTR { continue }
            // What a server answering in clear looks like to a TLS client.
            let plain = reason.contains("wrong version number") || reason.contains("packet length too long")
            throw ClientError.connect(endpoint: endpoint.description, reason: "TLS handshake failed: \(reason)"
                                      + (plain ? "; the server does not speak TLS on this port: connect without --tls" : ""))
        }
    }
}

/// A blocking connection to profiled that speaks the line protocol, with pipelining:
/// `send` queues requests, `flush` writes them, `readReply` takes replies in order.
///
/// Not thread-safe: use one connection from one thread at a time (open one per thread).
public final class ProfileConnection {
    public let endpoint: Endpoint
    private let fd: Int32
    /// The TLS session every byte passes through; nil in clear.
    private let tls: TLSSession?
    private var outgoing: [UInt8] = []
    private var incoming: [UInt8] = []
    private var readPosition = 0
    /// What a connection the server ends before its first reply most likely met, said with
    /// the error: a TLS port reached in clear, or a server that asks for a client certificate.
    private let firstReplyHint: String
    private var repliedOnce = false

    /// Connects, over TLS when `tls` is given, waiting at most `timeoutSeconds` for the
    /// handshake and for any later read or write.
    public convenience init(_ endpoint: Endpoint, timeoutSeconds: Int = 30, tls: TLSClientOptions? = nil) throws(ClientError) {
        let context = try tls?.makeContext()
        try self.init(endpoint, timeoutSeconds: timeoutSeconds, tlsContext: context, serverName: tls?.serverName,
                      sendsCertificate: tls?.certificateFile != nil)
    }

    /// Connects, over TLS with a context made once for many connections when `tlsContext` is
    /// given; `sendsCertificate`: the context has a client certificate.
    public init(_ endpoint: Endpoint, timeoutSeconds: Int, tlsContext: TLSContext?, serverName: String?,
                sendsCertificate: Bool = false) throws(ClientError) {
        self.endpoint = endpoint
        firstReplyHint = tlsContext == nil ? " (if this port speaks TLS, connect with --tls)"
            : sendsCertificate ? "" : " (the server may require a client certificate: --cert and --key)"
        fd = try openStream(to: endpoint)
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if let tlsContext {
            do {
                tls = try startTLS(on: fd, to: endpoint, context: tlsContext, serverName: serverName)
            } catch {
                close(fd)
                throw error
            }
        } else {
            tls = nil
        }
        incoming.reserveCapacity(1 << 16)
    }

    deinit {
        tls?.shutdown()
        close(fd)
    }

    /// The negotiated TLS version ("TLSv1.3"); nil in clear.
    public var tlsVersion: String? { tls?.version }

    /// The common name of the server's verified certificate; nil in clear or unverified.
    public var tlsPeerCommonName: String? { tls?.verifiedPeerCommonName }

    // MARK: Pipelining primitives

    /// Queues one request made of these tokens, each written bare or quoted as needed.
    public func send(_ tokens: [[UInt8]]) {
        for (i, token) in tokens.enumerated() {
            if i > 0 { outgoing.append(0x20) }
            if i == 0 { outgoing.append(contentsOf: token) } else { ValueEncoder.append(token, to: &outgoing) }
        }
        outgoing.append(0x0A)
    }

    /// Queues a verb and string arguments.
    public func send(_ verb: String, _ arguments: [String] = []) {
        send([Array(verb.utf8)] + arguments.map { Array($0.utf8) })
    }

    /// Queues raw bytes exactly as given (tests use it for malformed input).
    public func sendRaw(_ bytes: [UInt8]) {
        outgoing.append(contentsOf: bytes)
    }

    /// Bytes queued and not yet written.
    public var queuedBytes: Int { outgoing.count }

    /// Writes everything queued.
    ///
    /// - Throws: `.io` when the write fails. When the server had closed the connection, what
    ///   it sent before closing stays readable with `readLine` and `readReply`, and the
    ///   error names its last line (such as `ERROR TOOLONG ...`): that says why it closed.
    public func flush() throws(ClientError) {
        var offset = 0
        while offset < outgoing.count {
            let n = outgoing.withUnsafeBytes { raw in write(raw.baseAddress! + offset, raw.count - offset) }
            if n < 0 {
                let error = errno
                if error == EINTR { continue }
                var reason = "write to \(endpoint) failed: \(String(cString: strerror(error)))"
                if error == EPIPE || error == ECONNRESET, let last = readUntilClosed() {
                    reason += "; the server's last reply: \(String(decoding: last, as: UTF8.self))"
                } else if !repliedOnce {
                    reason += firstReplyHint
                }
                throw ClientError.io(reason)
            }
            offset += n
        }
        outgoing.removeAll(keepingCapacity: true)
    }

    /// Writes everything queued, then shuts the sending side (over TLS: close_notify): the
    /// server answers the lines it received, then closes.
    public func finishSending() throws(ClientError) {
        try flush()
        if let tls { tls.shutdown() } else { shutdown(fd, Int32(SHUT_WR)) }
    }

    /// Writes what the socket takes now, as `send` reports it (through TLS when on).
    private func write(_ bytes: UnsafeRawPointer, _ count: Int) -> Int {
        guard let tls else { return Glibc.send(fd, bytes, count, Int32(MSG_NOSIGNAL)) }
        return tls.send(bytes, count: count)
    }

    /// Reads what has arrived, as `recv` reports it (through TLS when on).
    private func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        guard let tls else { return recv(fd, buffer, count, 0) }
        return tls.receive(into: buffer, count: count)
    }

    /// Reads what a server that closed the connection sent before it did; returns its last line.
    private func readUntilClosed() -> ArraySlice<UInt8>? {
        while true {
            do { try fill() } catch { break }
        }
        let unread = incoming[readPosition...]
        guard let end = unread.lastIndex(of: 0x0A) else { return nil }
        let start = unread[..<end].lastIndex(of: 0x0A).map { $0 + 1 } ?? unread.startIndex
        return unread[start..<end]
    }

    /// Reads one reply line, without its LF. Throws `.io` when the server closed the connection.
    public func readLine() throws(ClientError) -> [UInt8] {
        while true {
            if let lf = incoming[readPosition...].firstIndex(of: 0x0A) {
                let line = Array(incoming[readPosition..<lf])
                readPosition = lf + 1
                if readPosition == incoming.count {
                    incoming.removeAll(keepingCapacity: true)
                    readPosition = 0
                }
                return line
            }
            if readPosition > 0 {
                incoming.removeFirst(readPosition)
                readPosition = 0
            }
            try fill()
        }
    }

    /// Whether the server has closed the connection (after reading everything it sent).
    public func isClosedByServer() throws(ClientError) -> Bool {
        if readPosition < incoming.count { return false }
        do {
            try fill()
            return false
        } catch .io {
            return true
        }
    }

    private func fill() throws(ClientError) {
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read($0.baseAddress!, $0.count) }
            if n > 0 {
                incoming.append(contentsOf: chunk[0..<n])
                repliedOnce = true
                return
            }
            let hint = repliedOnce ? "" : firstReplyHint
            if n == 0 { throw ClientError.io("\(endpoint) closed the connection\(hint)") }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw ClientError.io("timed out waiting for \(endpoint)") }
            throw ClientError.io("read from \(endpoint) failed: \(String(cString: strerror(errno)))\(hint)")
        }
    }

    /// Reads one single-line reply as tokens; `ERROR` replies throw `.server`.
    public func readReply() throws(ClientError) -> [[UInt8]] {
        let line = try readLine()
        try throwIfError(line)
        do {
            return try LineTokenizer.tokens(of: line)
        } catch {
            throw ClientError.unexpectedReply(String(decoding: line, as: UTF8.self))
        }
    }

    /// Reads a multi-line reply (MGET, RECENT, SCAN, STATS) up to its `END`; an `ERROR` line throws.
    public func readLines() throws(ClientError) -> [[[UInt8]]] {
        var lines: [[[UInt8]]] = []
        while true {
            let tokens = try readReply()
            if tokens == [Array("END".utf8)] { return lines }
            lines.append(tokens)
        }
    }

    private func throwIfError(_ line: [UInt8]) throws(ClientError) {
        guard line.starts(with: Array("ERROR ".utf8)) else { return }
        let rest = line.dropFirst(6)
        let code = rest.prefix { $0 != 0x20 }
        let message = rest.dropFirst(code.count + 1)
        throw ClientError.server(code: String(decoding: code, as: UTF8.self), message: String(decoding: message, as: UTF8.self))
    }

    // MARK: Commands

    /// A round trip of one single-line request.
    public func call(_ tokens: [[UInt8]]) throws(ClientError) -> [[UInt8]] {
        send(tokens)
        try flush()
        return try readReply()
    }

    private func expect(_ tokens: [[UInt8]], _ word: String) throws(ClientError) {
        let reply = try call(tokens)
        guard reply == [Array(word.utf8)] else { throw unexpected(reply) }
    }

    public func ping() throws(ClientError) {
        try expect([bytes("PING")], "PONG")
    }

    public func auth(_ token: String) throws(ClientError) {
        try expect([bytes("AUTH"), Array(token.utf8)], "OK")
    }

    /// The profile, or nil when the id has none.
    public func get(_ userId: [UInt8]) throws(ClientError) -> Profile? {
        try profileOrNil(call([bytes("GET"), userId]))
    }

    /// One entry per id, in order.
    public func mget(_ userIds: [[UInt8]]) throws(ClientError) -> [Profile?] {
        send([bytes("MGET")] + userIds)
        try flush()
        var result: [Profile?] = []
        for line in try readLines() { result.append(try profileOrNil(line)) }
        return result
    }

    public func set(_ profile: Profile) throws(ClientError) {
        try expect([bytes("SET"), profile.userId, profile.name, profile.portraitUri], "STORED")
    }

    /// Writes all profiles in one transaction; returns how many the server stored.
    @discardableResult
    public func mset(_ profiles: [Profile]) throws(ClientError) -> Int {
        sendMSet(profiles)
        try flush()
        return try readStoredCount()
    }

    /// Queues an MSET without waiting (for pipelined imports); read its reply with `readStoredCount`.
    public func sendMSet(_ profiles: [Profile]) {
        var tokens: [[UInt8]] = [bytes("MSET")]
        tokens.reserveCapacity(1 + 3 * profiles.count)
        for p in profiles { tokens += [p.userId, p.name, p.portraitUri] }
        send(tokens)
    }

    public func readStoredCount() throws(ClientError) -> Int {
        let reply = try readReply()
        guard reply.count == 2, reply[0] == bytes("STORED"), let n = Int(String(decoding: reply[1], as: UTF8.self)) else {
            throw unexpected(reply)
        }
        return n
    }

    /// Changes the given fields; false when the id has no profile.
    public func update(_ userId: [UInt8], name: [UInt8]? = nil, portraitUri: [UInt8]? = nil) throws(ClientError) -> Bool {
        var tokens = [bytes("UPDATE"), userId]
        if let name { tokens += [bytes("name"), name] }
        if let portraitUri { tokens += [bytes("portraitUri"), portraitUri] }
        let reply = try call(tokens)
        if reply == [bytes("UPDATED")] { return true }
        if reply.first == bytes("NOTFOUND") { return false }
        throw unexpected(reply)
    }

    /// True when a profile was removed.
    public func del(_ userId: [UInt8]) throws(ClientError) -> Bool {
        let reply = try call([bytes("DEL"), userId])
        if reply == [bytes("DELETED")] { return true }
        if reply.first == bytes("NOTFOUND") { return false }
        throw unexpected(reply)
    }

    public func exists(_ userId: [UInt8]) throws(ClientError) -> Bool {
        let reply = try call([bytes("EXISTS"), userId])
        if reply == [bytes("YES")] { return true }
        if reply == [bytes("NO")] { return false }
        throw unexpected(reply)
    }

    public func count() throws(ClientError) -> Int {
        let reply = try call([bytes("COUNT")])
        guard reply.count == 2, reply[0] == bytes("COUNT"), let n = Int(String(decoding: reply[1], as: UTF8.self)) else {
            throw unexpected(reply)
        }
        return n
    }

    /// The most recently written profiles, newest first.
    public func recent(_ limit: Int = 20) throws(ClientError) -> [Profile] {
        send([bytes("RECENT"), bytes(String(limit))])
        try flush()
        return try readProfiles()
    }

    /// Up to `limit` profiles whose id sorts after `after`, ascending.
    public func scan(after: [UInt8], limit: Int = 100) throws(ClientError) -> [Profile] {
        send([bytes("SCAN"), after, bytes(String(limit))])
        try flush()
        return try readProfiles()
    }

    /// STATS as name/value pairs, in the server's order.
    public func stats() throws(ClientError) -> [(name: String, value: String)] {
        send([bytes("STATS")])
        try flush()
        var result: [(name: String, value: String)] = []
        for line in try readLines() {
            guard line.count == 3, line[0] == bytes("STAT") else { throw unexpected(line) }
            result.append((String(decoding: line[1], as: UTF8.self), String(decoding: line[2], as: UTF8.self)))
        }
        return result
    }

    public func flushAll() throws(ClientError) {
        try expect([bytes("FLUSHALL")], "OK")
    }

    public func quit() throws(ClientError) {
        try expect([bytes("QUIT")], "BYE")
    }

    private func readProfiles() throws(ClientError) -> [Profile] {
        var result: [Profile] = []
        for line in try readLines() {
            guard let profile = try profileOrNil(line) else { throw unexpected(line) }
            result.append(profile)
        }
        return result
    }

    private func profileOrNil(_ reply: [[UInt8]]) throws(ClientError) -> Profile? {
        if reply.count == 4 && reply[0] == bytes("VALUE") {
            return Profile(userId: reply[1], name: reply[2], portraitUri: reply[3])
        }
        if reply.count == 2 && reply[0] == bytes("NOTFOUND") { return nil }
        throw unexpected(reply)
    }

    private func unexpected(_ reply: [[UInt8]]) -> ClientError {
        .unexpectedReply(reply.map { String(decoding: $0, as: UTF8.self) }.joined(separator: " "))
    }
}

@inline(__always)
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Why a connect failed, in words that say what to check: a refusal or a missing socket
/// file means no server listens there.
private func connectFailure(_ code: Int32) -> String {
    let text = String(cString: strerror(code))
    switch code {
    case ECONNREFUSED, ENOENT: return "no server is listening there (\(text)); is profiled running, on this address and port?"
    default: return text
    }
}

/// Opens a blocking stream socket to the endpoint, with TCP_NODELAY over TCP: how every
/// connection of this library starts, and profilebench's. The caller owns the descriptor.
public func openStream(to endpoint: Endpoint) throws(ClientError) -> Int32 {
    switch endpoint {
    case .unix(let path):
        guard let address = UnixSocketAddress(path: path) else {
            throw ClientError.connect(endpoint: endpoint.description, reason: "socket path too long")
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let rc = address.withSockaddr { connect(fd, $0, $1) }
        guard rc == 0 else {
            let reason = connectFailure(errno)
            close(fd)
            throw ClientError.connect(endpoint: endpoint.description, reason: reason)
        }
        return fd
    case .tcp(let host, let port):
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(bare, String(port), &hints, &list) == 0, let first = list else {
            throw ClientError.connect(endpoint: endpoint.description, reason: "cannot resolve \(host)")
        }
        defer { freeaddrinfo(list) }
        var reason = "no address"
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            let fd = socket(current.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd >= 0 {
                if connect(fd, current.pointee.ai_addr, current.pointee.ai_addrlen) == 0 {
                    var one: Int32 = 1
                    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                    return fd
                }
                reason = connectFailure(errno)
                close(fd)
            }
            entry = current.pointee.ai_next
        }
        throw ClientError.connect(endpoint: endpoint.description, reason: reason)
    }
}
