import CLibevent
import CLinux
import Glibc
import UnixSocketAddress

/// A failed system call: which call, on what, and errno. A plain value; any thread may use it.
public struct SystemError: Error, CustomStringConvertible, Sendable {
    public var call: String
    public var subject: String
    public var code: Int32
    public var description: String {
        "\(call) \(subject): \(String(cString: strerror(code)))"
    }
}

/// Creates listening TCP sockets for every address `host` resolves to (`localhost` is both
/// 127.0.0.1 and ::1); with port 0 they all share the port the first one got.
func listenTCP(host: String, port: UInt16, backlog: Int32 = 1024) throws(SystemError) -> [Int32] {
    let subject = "\(host):\(port)"
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
    var list: UnsafeMutablePointer<addrinfo>? = nil
    let host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    let rc = getaddrinfo(host, String(port), &hints, &list)
    guard rc == 0, list != nil else {
        throw SystemError(call: "getaddrinfo", subject: subject, code: rc == EAI_SYSTEM ? errno : EINVAL)
    }
    defer { freeaddrinfo(list) }
    var fds: [Int32] = []
    var chosenPort = port
    var entry = list
    while let current = entry {
        entry = current.pointee.ai_next
        let family = current.pointee.ai_family
        guard family == AF_INET || family == AF_INET6 else { continue }
        if chosenPort != 0 {
            if family == AF_INET {
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port = chosenPort.bigEndian }
            } else {
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port = chosenPort.bigEndian }
            }
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { continue }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        guard bind(fd, current.pointee.ai_addr, current.pointee.ai_addrlen) == 0, listen(fd, backlog) == 0 else {
            let code = errno
            close(fd)
            for open in fds { close(open) }
            throw SystemError(call: "bind", subject: subject, code: code)
        }
        if chosenPort == 0 { chosenPort = boundPort(of: fd) }
        fds.append(fd)
    }
    guard !fds.isEmpty else { throw SystemError(call: "bind", subject: subject, code: EADDRNOTAVAIL) }
    return fds
}

/// The address a listening socket is bound to, as `host:port` (`[::1]:port` for IPv6).
func boundAddress(of fd: Int32) -> String { socketAddress(of: fd, peer: false) }

/// The address of a connected socket's other end, the same way (`unix` for a Unix socket's).
func peerAddress(of fd: Int32) -> String { socketAddress(of: fd, peer: true) }

private func socketAddress(of fd: Int32, peer: Bool) -> String {
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    _ = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length) }
    }
    if Int32(storage.ss_family) == AF_UNIX { return "unix" }
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    if Int32(storage.ss_family) == AF_INET6 {
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                var address = a.pointee.sin6_addr
                inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
                return "[\(text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })]:\(UInt16(bigEndian: a.pointee.sin6_port))"
            }
        }
    }
    return withUnsafePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
            var address = a.pointee.sin_addr
            inet_ntop(AF_INET, &address, &text, socklen_t(text.count))
            return "\(text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }):\(UInt16(bigEndian: a.pointee.sin_port))"
        }
    }
}

/// The port a listening socket got (for `--port 0`).
func boundPort(of fd: Int32) -> UInt16 {
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let ok = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    } == 0
    guard ok else { return 0 }
    if Int32(storage.ss_family) == AF_INET6 {
        return withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) } }
    }
    return withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) } }
}

/// Creates a listening Unix domain socket, replacing a stale socket file left by a previous run.
func listenUnix(path: String, backlog: Int32 = 1024) throws(SystemError) -> Int32 {
    guard let address = UnixSocketAddress(path: path) else { throw SystemError(call: "bind", subject: path, code: ENAMETOOLONG) }
    // A socket file that nobody accepts on is left over from a crash; anything else is not ours to remove.
    var status = stat()
    if lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFSOCK {
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let connected = address.withSockaddr { connect(probe, $0, $1) } == 0
        close(probe)
        if connected { throw SystemError(call: "bind", subject: path, code: EADDRINUSE) }
        unlink(path)
    }
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw SystemError(call: "socket", subject: path, code: errno) }
    let bound = address.withSockaddr { bind(fd, $0, $1) }
    guard bound == 0 else {
        let code = errno
        close(fd)
        throw SystemError(call: "bind", subject: path, code: code)
    }
    guard listen(fd, backlog) == 0 else {
        let code = errno
        close(fd)
        throw SystemError(call: "listen", subject: path, code: code)
    }
    return fd
}

/// Writes all of `bytes` to a non-blocking socket if it can right now; used only for the BUSY refusal.
func writeBestEffort(_ fd: Int32, _ bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
}

/// What one accept on a listening socket gave.
enum AcceptOutcome {
    /// A new connection, non-blocking and close-on-exec.
    case connection(Int32)
    /// Nothing more is waiting.
    case drained
    /// Out of descriptors or memory (errno given): the pending connection stays readable, so
    /// the caller pauses accepting instead of spinning on it.
    case exhausted(Int32)
    /// Another failure (errno given), worth a log line.
    case failed(Int32)
}

/// Accepts one connection from `listenFD`, every listener's way; an interrupted call, or a
/// connection reset before it was taken, is tried again.
func acceptConnection(_ listenFD: Int32) -> AcceptOutcome {
    while true {
        let fd = accept4(listenFD, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
        if fd >= 0 { return .connection(fd) }
        let error = errno
        switch error {
        case EINTR, ECONNABORTED: continue
        case EAGAIN, EWOULDBLOCK: return .drained
        case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .exhausted(error)
        default: return .failed(error)
        }
    }
}
