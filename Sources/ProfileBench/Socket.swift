import Glibc
import ProfileClient

/// Why a run could not start or had to stop: one sentence for people.
public struct BenchFailure: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

func errnoText() -> String { String(cString: strerror(errno)) }

/// Opens a connection to the target as ProfileClient does (blocking connect, TCP_NODELAY);
/// the load loop then makes it non-blocking.
func openConnection(_ options: BenchOptions) throws(BenchFailure) -> Int32 {
    let endpoint: Endpoint = options.unixPath.map { .unix(path: $0) }
        ?? .tcp(host: options.host, port: options.port ?? options.target.defaultPort)
    do {
        return try openStream(to: endpoint)
    } catch {
        let reason: String
        switch error {
        case .connect(_, let why): reason = why
        default: reason = "\(error)"
        }
        throw BenchFailure("cannot connect to \(options.endpointDescription): \(reason)")
    }
}

func makeNonBlocking(_ fd: Int32) {
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
}

/// Sends everything in `buffer` and reads one reply to `expecting`, blocking; for AUTH
/// before the load starts.
func blockingRoundTrip(_ connection: LoadConnection, _ target: TargetProtocol, expecting: ExpectedReply,
                       endpoint: String) throws(BenchFailure) {
    let buffer = connection.output
    while !buffer.isEmpty {
        let n = connection.send(buffer.readable.baseAddress!, count: buffer.count)
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
            let n = connection.receive(into: space, count: buffer.spaceAtEnd)
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
