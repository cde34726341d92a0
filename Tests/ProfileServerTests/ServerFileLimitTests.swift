import Glibc
import ProfileClient
import ProfileTestSupport
import Testing

/// Out of file descriptors: profiled says so at start, pauses accepting instead of spinning,
/// and keeps serving; it takes new connections again once descriptors free up.
@Suite struct ServerFileLimitTests {
    /// profiled on one worker with 48 file descriptors, a store of its own and `arguments`;
    /// returns once it listens, with its line protocol port.
    static func start(_ arguments: [String]) throws -> (pid: pid_t, logPath: String, port: UInt16) {
        let directory = try makeTemporaryDirectory()
        let logPath = directory + "/profiled.log"
        let pid = try spawn("/usr/bin/prlimit", args: ["--nofile=48", executable("profiled"), "--port", "0", "--threads", "1",
                                                        "--db", directory + "/p.sqlite3"] + arguments,
                            stderrPath: logPath)
        var port: UInt16 = 0
        do {
            try waitFor {
                for line in readText(logPath).split(separator: "\n") where line.contains("msg=listening") {
                    port = UInt16(String(line.reversed().prefix { $0.isNumber }.reversed())) ?? 0
                }
                return port != 0
            }
        } catch {
            kill(pid)
            throw error
        }
        return (pid, logPath, port)
    }

    static func kill(_ pid: pid_t) {
        Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    @Test func runningOutOfDescriptorsPausesAcceptsAndRecovers() throws {
        // prlimit is util-linux's, which every Debian system has: without it the test fails.
        try #require(access("/usr/bin/prlimit", X_OK) == 0, "/usr/bin/prlimit (util-linux) is needed")
        let (pid, logPath, port) = try Self.start([])
        defer { Self.kill(pid) }
        #expect(readText(logPath).contains("open file limit is below what --max-connections needs"))

        let first = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 30)
        #expect(try first.roundTrip("PING\n") == "PONG")
        // More connections than descriptors: the kernel queues them; the server cannot take them all.
        var crowd: [ProfileConnection] = []
        for _ in 0..<60 { crowd.append(try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 30)) }
        try waitFor { readText(logPath).contains("pausing accepts") }
        // The connection it already has is still served.
        #expect(try first.roundTrip("PING\n") == "PONG")
        // Descriptors free up: the waiting connections are taken and answered.
        crowd.removeAll()
        let late = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 30)
        #expect(try late.roundTrip("PING\n") == "PONG")
    }

    /// Idle connections to the metrics listener that use up the descriptors: accepting pauses
    /// instead of spinning, the log says so once, the idle ones are closed at the metrics
    /// deadline (5 s), and /healthz answers again once they are gone.
    @Test func idleMetricsConnectionsNeitherSpinNorFloodTheLogAndAreClosed() throws {
        // prlimit is util-linux's, which every Debian system has: without it the test fails.
        try #require(access("/usr/bin/prlimit", X_OK) == 0, "/usr/bin/prlimit (util-linux) is needed")
        let (pid, logPath, port) = try Self.start(["--metrics", "127.0.0.1:0"])
        defer { Self.kill(pid) }
        let metrics = try metricsPort(readText(logPath))
        let client = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 30)
        #expect(try client.roundTrip("PING\n") == "PONG")
        var crowd: [ProfileConnection] = []
        for _ in 0..<80 { crowd.append(try ProfileConnection(.tcp(host: "127.0.0.1", port: metrics), timeoutSeconds: 10)) }
        // A listener that spins on accept writes a warning each turn: measured by size first,
        // since reading a log that grows by megabytes a second is itself slow.
        usleep(1_000_000)
        var status = stat()
        stat(logPath, &status)
        #expect(status.st_size < 100_000, "the log grew to \(status.st_size) bytes in the second after the crowd came")
        guard status.st_size < 100_000 else { return }
        try waitFor { readText(logPath).contains("pausing accepts") }
        // Two seconds of the crowd waiting: little CPU, and the log stays as it was.
        let cpuBefore = try processCPUSeconds(pid)
        let logBefore = readText(logPath).split(separator: "\n").count
        usleep(2_000_000)
        let cpu = try processCPUSeconds(pid) - cpuBefore
        #expect(cpu < 0.5, "the server used \(cpu) s of CPU in 2 s while accepts were paused")
        let logLines = readText(logPath).split(separator: "\n")
        #expect(logLines.count - logBefore <= 2, "\(logLines.suffix(5))")
        #expect(logLines.filter { $0.contains("pausing accepts") }.count == 1)
        #expect(try client.roundTrip("PING\n") == "PONG")
        // Past the deadline the idle ones it took are closed (the first to connect were taken
        // first); once the crowd is gone, a scrape gets through.
        usleep(3_500_000)
        var closedByServer = 0
        for connection in crowd.prefix(5) {
            do { _ = try connection.line() } catch { if "\(error)".contains("closed") { closedByServer += 1 } }
        }
        #expect(closedByServer == 5)
        crowd.removeAll()
        var health = 0
        let deadline = monotonicSeconds() + 10
        while health != 200 && monotonicSeconds() < deadline {
            usleep(100_000)
            health = (try? httpStatus(port: metrics, path: "/healthz", timeoutSeconds: 1)) ?? 0
        }
        #expect(health == 200)
    }
}

/// User and system CPU seconds of a process so far, from /proc.
func processCPUSeconds(_ pid: pid_t) throws -> Double {
    let stat = readText("/proc/\(pid)/stat")
    guard let close = stat.lastIndex(of: ")") else { throw TestFailure("no /proc/\(pid)/stat") }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    // After the command: state is field 3 of the whole line; utime and stime are 14 and 15.
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else {
        throw TestFailure("cannot read /proc/\(pid)/stat: \(stat)")
    }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
