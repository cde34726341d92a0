import ProfileTestSupport
import Glibc
import ProfileClient
import Synchronization

// Shared by the reliability suites: how big a run is, clocks, threads, a seeded generator,
// and reading a process's memory.

/// Whether the long runs were asked for (`PROFILED_RELIABILITY_FULL=1`); the default sizes keep
/// the whole test target fast enough for every Scripts/test.
let reliabilityFull: Bool = {
    guard let value = getenv("PROFILED_RELIABILITY_FULL") else { return false }
    return String(cString: value) == "1"
}()

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}



/// A process's resident set size in KiB (VmRSS in /proc/PID/status), or nil once it is gone.
func residentKiB(of pid: pid_t) -> Int? {
    for line in readText("/proc/\(pid)/status").split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    }
    return nil
}


/// Whether this process runs under ThreadSanitizer or AddressSanitizer: their shadow memory
/// and slowdown make the memory and latency bounds meaningless, so those are only reported.
let underSanitizer: Bool = {
    guard let handle = dlopen(nil, RTLD_NOW) else { return false }
    defer { dlclose(handle) }
    return dlsym(handle, "__tsan_init") != nil || dlsym(handle, "__asan_init") != nil
}()

/// A shared tally several threads add to.
final class Tally: Sendable {
    private let value = Atomic<Int>(0)
    func add(_ n: Int = 1) { value.add(n, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

/// Round-trip times of PING on one connection, in seconds; the server is "serving normally"
/// while these stay small.
func pingRoundTrips(_ connection: ProfileConnection, count: Int) throws -> [Double] {
    var times: [Double] = []
    for _ in 0..<count {
        let start = monotonicSeconds()
        try connection.ping()
        times.append(monotonicSeconds() - start)
    }
    return times
}

/// A blocking loopback TCP connection as a bare descriptor, for clients that break the protocol
/// or hold the server's memory; a receive buffer of `receiveBuffer` bytes when not 0, set before
/// connecting so the window stays small. Sends and receives time out after 10 s.
func rawLoopbackConnection(port: UInt16, receiveBuffer: Int32 = 0) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var size = receiveBuffer
    if size > 0 { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else {
        let code = errno
        close(fd)
        throw TestFailure("connect: \(String(cString: strerror(code)))")
    }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return fd
}

/// 1,000 profiles `esc0` to `esc999` whose every byte is sent escaped (`\x01`): VALUE lines of
/// 9.3 KB, an MGET of all of them 9.3 MB. Sent pre-escaped and pipelined, in MSETs of five,
/// since the client library would spend seconds escaping them.
enum EscapedProfiles {
    static let ids = (0..<1000).map { "esc\($0)" }

    static func quoted(_ count: Int) -> String { "\"" + String(repeating: "\\x01", count: count) + "\"" }

    /// What a GET of `id` answers while it has its first value.
    static func valueLine(_ id: String) -> String { "VALUE \(id) \(quoted(256)) \(quoted(2048))" }

    /// Stores them all through `connection`.
    static func store(through connection: ProfileConnection) throws {
        let values = Array(" \(quoted(256)) \(quoted(2048))".utf8)
        var setup: [UInt8] = []
        for start in stride(from: 0, to: ids.count, by: 5) {
            setup += Array("MSET".utf8)
            for id in ids[start..<start + 5] { setup += Array(" \(id)".utf8) + values }
            setup.append(0x0A)
        }
        connection.sendRaw(setup)
        try connection.flush()
        for _ in 0..<ids.count / 5 {
            let reply = try connection.line()
            guard reply == "STORED 5" else { throw TestFailure("storing the escaped profiles: \(reply)") }
        }
    }

    /// The MGET of them all, as one request line.
    static var mget: [UInt8] { Array(("MGET " + ids.joined(separator: " ") + "\n").utf8) }
}

/// Reads a slow reader's socket, with a large receive buffer from now on, until the replies
/// end with `PONG`; returns their lines.
func readLinesUntilPong(_ fd: Int32) throws -> [String] {
    var readFaster: Int32 = 1 << 20
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &readFaster, socklen_t(MemoryLayout<Int32>.size))
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16384)
    while Array(received.suffix(5)) != Array("PONG\n".utf8) {
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { throw TestFailure("the connection ended after \(received.count) bytes") }
        received += chunk[0..<n]
    }
    return received.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
}

/// The first line where `lines` and `expected` differ, with its start; nil when they agree
/// as far as both go.
func firstDifference(_ lines: [String], _ expected: [String]) -> String? {
    guard let index = zip(lines, expected).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset else { return nil }
    return "line \(index) differs: \(lines[index].prefix(40))"
}
