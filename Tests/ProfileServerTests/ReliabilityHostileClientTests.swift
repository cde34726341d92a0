import ProfileTestSupport
import Glibc
import ProfileClient
import Synchronization
import Testing

/// Clients that misbehave, one attack at a time against one server, while a well-behaved client
/// keeps pinging it and a few very slow clients trickle their requests in the whole time.
///
/// The bounds are behaviour bounds, far from what the server does, not benchmarks: a normal
/// client's PING round trip stays under `pingBound` during every attack, and the server's
/// resident memory stays under `residentBoundKiB` throughout. A loop held up by an attack shows
/// as a round trip as long as the attack; on two cores shared with the other suites a healthy
/// one has taken up to 0.53 s, so the bound leaves room for that.
@Suite(.serialized) struct ReliabilityHostileClientTests {
    static let pingBound = 1.0
    static let residentBoundKiB = 64 * 1024

    @Test func theServerKeepsServingOthersAndStaysSmall() throws {
        let server = try TestServer()
        let setup = try server.connect()
        _ = try setup.mset((0..<100).map { Profile(userId: "user-\($0)", name: "Name \($0)", portraitUri: "https://cdn.example/p/\($0).png") })
        let endpoint = server.endpoint
        let pid = server.pid
        let figures = Figures()

        // One byte a second, for the whole run: they must neither hold others up nor be dropped.
        let slowClients = 20
        let connections = reliabilityFull ? 5000 : 1200
        let storm = reliabilityFull ? 20_000 : 5000
        let noisy = reliabilityFull ? 1000 : 50
        let slowDone = Tally()
        let slowFailures = Locked<[String]>([])
        let attacks: [(String, @Sendable () throws -> Void)] = [
            ("\(connections) connections at once", { try manyConnections(endpoint, count: connections) }),
            ("a 50 MB line without a newline", { try hugeLine(endpoint, megabytes: 50) }),
            ("200,000 pipelined requests, never read", { try pipelineWithoutReading(endpoint, requests: 200_000) }),
            ("random bytes on \(noisy) connections", { try randomBytes(endpoint, connections: noisy, bytesEach: 64 << 10) }),
            ("a storm of \(storm) connect-and-close", { try connectStorm(endpoint, connections: storm) }),
        ]
        onThreads(slowClients + 1) { i in
            if i < slowClients {
                do {
                    try trickle(endpoint, request: "PING\n", bytesPerSecond: 1)
                    slowDone.add()
                } catch {
                    slowFailures.withLock { $0.append("slow client \(i): \(error)") }
                }
                return
            }
            for (name, attack) in attacks {
                figures.run(name, endpoint: endpoint, pid: pid, attack)
            }
        }
        for line in figures.report { print("reliability hostile: \(line)") }
        for failure in figures.failures { Issue.record(Comment(rawValue: failure)) }
        for failure in slowFailures.withLock({ $0 }) { Issue.record(Comment(rawValue: failure)) }
        #expect(slowDone.count == slowClients)

        // Everything it was sent is gone again: connections closed, memory bounded, still serving.
        let c = try server.connect()
        var open = -1
        // Up to 20 s: under ThreadSanitizer, beside the other suites, closing the storm's
        // thousands of connections once took longer than 5 s; a connection left open for good
        // still fails it.
        for _ in 0..<2000 {
            open = Int(try c.stats().first { $0.name == "curr_connections" }!.value)!
            if open == 2 { break }
            usleep(10_000)
        }
        #expect(open == 2, "connections left open after the attacks: \(open)")
        #expect(try c.get(Array("user-7".utf8))?.name == Array("Name 7".utf8))
        let resident = residentKiB(of: server.pid) ?? Int.max
        print("reliability hostile: resident after all attacks \(resident / 1024) MiB (bound \(Self.residentBoundKiB / 1024) MiB)")
        #expect(underSanitizer || resident < Self.residentBoundKiB)
        #expect(exitCode(server.stop()) == 0, "\(server.log.suffix(4000))")
    }
}

/// Runs attacks with a probe beside each, and keeps what it saw.
final class Figures: @unchecked Sendable {
    private(set) var report: [String] = []
    private(set) var failures: [String] = []

    func run(_ name: String, endpoint: Endpoint, pid: pid_t, _ attack: @escaping @Sendable () throws -> Void) {
        let done = Atomic<Bool>(false)
        let outcome = Locked<(slowest: Double, pings: Int, peakKiB: Int, error: String?)>((0, 0, 0, nil))
        onThreads(2) { i in
            if i == 0 {
                do { try attack() } catch { outcome.withLock { $0.error = "\(name): \(error)" } }
                done.store(true, ordering: .sequentiallyConsistent)
                return
            }
            do {
                let probe = try ProfileConnection(endpoint, timeoutSeconds: 10)
                repeat {
                    let time = try pingRoundTrips(probe, count: 1)[0]
                    let resident = residentKiB(of: pid) ?? 0
                    outcome.withLock {
                        $0.slowest = max($0.slowest, time)
                        $0.pings += 1
                        $0.peakKiB = max($0.peakKiB, resident)
                    }
                    usleep(2000)
                } while !done.load(ordering: .sequentiallyConsistent)
            } catch {
                outcome.withLock { $0.error = "\(name): the probe failed: \(error)" }
            }
        }
        let seen = outcome.withLock { $0 }
        report.append("\(name): \(seen.pings) pings, slowest \(Int(seen.slowest * 1000)) ms, peak resident \(seen.peakKiB / 1024) MiB")
        if let error = seen.error { failures.append(error) }
        if underSanitizer { return }
        if seen.slowest >= ReliabilityHostileClientTests.pingBound {
            failures.append("\(name): a PING took \(Int(seen.slowest * 1000)) ms")
        }
        if seen.peakKiB >= ReliabilityHostileClientTests.residentBoundKiB {
            failures.append("\(name): the server's resident memory reached \(seen.peakKiB / 1024) MiB")
        }
    }
}

// MARK: The attacks. Each is bounded in count and time and talks only to 127.0.0.1.

/// Opens `count` connections, has each answer a PING while all are open, then closes them.
private func manyConnections(_ endpoint: Endpoint, count: Int) throws {
    var connections: [ProfileConnection] = []
    for _ in 0..<count { connections.append(try ProfileConnection(endpoint, timeoutSeconds: 10)) }
    for c in connections { c.send("PING") }
    for c in connections { try c.flush() }
    for c in connections {
        let reply = try c.line()
        guard reply == "PONG" else { throw TestFailure("one of \(count) connections got \(reply)") }
    }
}

/// Sends up to `megabytes` MB without a newline; the server must answer TOOLONG and close long
/// before it has all of it.
private func hugeLine(_ endpoint: Endpoint, megabytes: Int) throws {
    let fd = try rawConnect(endpoint)
    defer { close(fd) }
    let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
    var sent = 0
    let deadline = monotonicSeconds() + 20
    while sent < megabytes << 20 && monotonicSeconds() < deadline {
        let n = chunk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { continue }
            break // reset or closed by the server: what we expect
        }
        sent += n
    }
    guard sent < megabytes << 20 else { throw TestFailure("the server took all \(megabytes) MB of one line") }
    // The reply may be lost to the reset the close causes; if it arrived, it is TOOLONG.
    var reply = [UInt8](repeating: 0, count: 256)
    let n = reply.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
    if n > 0 && !reply.starts(with: Array("ERROR TOOLONG".utf8)) {
        throw TestFailure("a line over the limit got \(String(decoding: reply[0..<n], as: UTF8.self))")
    }
}

/// Sends `requests` GETs as fast as the server takes them, reads nothing, holds the connection
/// a moment, then drops it.
private func pipelineWithoutReading(_ endpoint: Endpoint, requests: Int) throws {
    let fd = try rawConnect(endpoint)
    defer { close(fd) }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    var bytes: [UInt8] = []
    for i in 0..<requests { bytes += Array("GET user-\(i % 100)\n".utf8) }
    var offset = 0
    let deadline = monotonicSeconds() + 3
    while offset < bytes.count && monotonicSeconds() < deadline {
        let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
        if n > 0 { offset += n } else if errno == EAGAIN { usleep(1000) } else if errno != EINTR { break }
    }
    usleep(300_000)
}

/// `connections` connections each send random bytes (newlines included) and drain what comes back.
private func randomBytes(_ endpoint: Endpoint, connections: Int, bytesEach: Int) throws {
    var random = SeededGenerator(seed: 0xBAD_B17E5)
    for _ in 0..<connections {
        let fd = try rawConnect(endpoint)
        defer { close(fd) }
        let bytes = (0..<bytesEach).map { _ in UInt8.random(in: 0...255, using: &random) }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var offset = 0
        var drain = [UInt8](repeating: 0, count: 1 << 16)
        let deadline = monotonicSeconds() + 2
        while offset < bytes.count && monotonicSeconds() < deadline {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n > 0 { offset += n } else if errno != EAGAIN && errno != EINTR { break }
            _ = drain.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        }
    }
}

/// `connections` connections from two threads, closed at once, some after half a request,
/// some after a whole one whose reply they never read. Two threads, as many as this machine
/// has cores: with four, the attackers' own connect calls starve every thread of the 2-core
/// machine and the probe measures the scheduler (see docs/RELIABILITY.md).
private func connectStorm(_ endpoint: Endpoint, connections: Int) throws {
    let failures = Tally()
    onThreads(2) { t in
        for i in 0..<(connections / 2) {
            guard let fd = try? rawConnect(endpoint) else { failures.add(); continue }
            switch i % 3 {
            case 1: _ = send(fd, "GET us", 6, Int32(MSG_NOSIGNAL))
            case 2: _ = send(fd, "GET user-\(t)\n", 11, Int32(MSG_NOSIGNAL))
            default: break
            }
            close(fd)
        }
    }
    if failures.count > 0 { throw TestFailure("\(failures.count) of \(connections) connects failed") }
}

/// Sends `request` a byte at a time at `bytesPerSecond`, then expects PONG.
private func trickle(_ endpoint: Endpoint, request: String, bytesPerSecond: Int) throws {
    let c = try ProfileConnection(endpoint, timeoutSeconds: 20)
    for byte in request.utf8 {
        c.sendRaw([byte])
        try c.flush()
        usleep(UInt32(1_000_000 / bytesPerSecond))
    }
    let reply = try c.line()
    guard reply == "PONG" else { throw TestFailure("got \(reply)") }
}

/// A raw connection to the server's TCP listener.
private func rawConnect(_ endpoint: Endpoint) throws -> Int32 {
    guard case .tcp(_, let port) = endpoint else { throw TestFailure("TCP only") }
    return try rawLoopbackConnection(port: port)
}
