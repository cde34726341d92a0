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
