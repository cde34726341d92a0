import Glibc

/// Why a run could not start or had to stop: one sentence for people.
public struct BenchFailure: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

func errnoText() -> String { String(cString: strerror(errno)) }

/// Opens a connection to the target the way a client would (blocking connect, TCP_NODELAY),
/// then makes it non-blocking for the load loop.
func openConnection(_ options: BenchOptions) throws(BenchFailure) -> Int32 {
    let fd: Int32
    if let path = options.unixPath {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw BenchFailure("cannot connect to \(options.endpointDescription): socket path too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
            raw[pathBytes.count] = 0
        }
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let reason = errnoText()
            close(fd)
            throw BenchFailure("cannot connect to \(options.endpointDescription): \(reason)")
        }
    } else {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let port = options.port ?? options.target.defaultPort
        guard getaddrinfo(options.host, String(port), &hints, &list) == 0, let first = list else {
            throw BenchFailure("cannot connect to \(options.endpointDescription): cannot resolve \(options.host)")
        }
        defer { freeaddrinfo(list) }
        var reason = "no address"
        var entry: UnsafeMutablePointer<addrinfo>? = first
        var connected: Int32 = -1
        while let current = entry, connected < 0 {
            let candidate = socket(current.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if candidate >= 0 {
                if connect(candidate, current.pointee.ai_addr, current.pointee.ai_addrlen) == 0 {
                    connected = candidate
                } else {
                    reason = errnoText()
                    close(candidate)
                }
            }
            entry = current.pointee.ai_next
        }
        guard connected >= 0 else { throw BenchFailure("cannot connect to \(options.endpointDescription): \(reason)") }
        fd = connected
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }
    return fd
}

func makeNonBlocking(_ fd: Int32) {
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
}

/// Sends everything in `buffer` and reads one reply to `expecting`, blocking; for AUTH
/// before the load starts.
func blockingRoundTrip(_ fd: Int32, _ buffer: ByteBuffer, _ target: TargetProtocol, expecting: ExpectedReply,
                       endpoint: String) throws(BenchFailure) {
    while !buffer.isEmpty {
        let n = send(fd, buffer.readable.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { throw BenchFailure("write to \(endpoint) failed: \(errnoText())") }
        buffer.consume(n)
    }
    while true {
        switch target.parse(buffer.readable, expecting: expecting) {
        case .reply(let reply):
            if reply.outcome == .error {
                throw BenchFailure("\(endpoint) refused AUTH: \(visible(buffer.readable))")
            }
            buffer.consume(reply.length)
            return
        case .garbage(let message):
            throw BenchFailure("\(endpoint) answered garbage: \(message)")
        case .incomplete:
            let space = buffer.reserve(4096)
            let n = recv(fd, space, buffer.spaceAtEnd, 0)
            if n < 0 && errno == EINTR { continue }
            if n == 0 { throw BenchFailure("\(endpoint) closed the connection before answering AUTH\(buffer.isEmpty ? "" : ": \(visible(buffer.readable))")") }
            guard n > 0 else { throw BenchFailure("read from \(endpoint) failed: \(errnoText())") }
            buffer.commit(n)
        }
    }
}

/// Nanoseconds on the monotonic clock.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// User plus system CPU seconds of this process so far.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
