import Glibc
import ProfileClient
import ProfileTestSupport
import Testing

/// Out of file descriptors: profiled says so at start, pauses accepting instead of spinning,
/// and keeps serving; it takes new connections again once descriptors free up.
@Suite struct ServerFileLimitTests {
    @Test func runningOutOfDescriptorsPausesAcceptsAndRecovers() throws {
        guard access("/usr/bin/prlimit", X_OK) == 0 else {
            print("skipped: prlimit is not installed here, so the file limit test did not run")
            return
        }
        let directory = try makeTemporaryDirectory()
        let logPath = directory + "/profiled.log"
        let pid = try spawn("/usr/bin/prlimit", args: ["--nofile=48", executable("profiled"), "--port", "0",
                                                        "--threads", "1", "--db", directory + "/p.sqlite3"],
                            stderrPath: logPath)
        defer {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        var port: UInt16 = 0
        try waitFor {
            for line in readText(logPath).split(separator: "\n") where line.contains("msg=listening") {
                port = UInt16(String(line.reversed().prefix { $0.isNumber }.reversed())) ?? 0
            }
            return port != 0
        }
        #expect(readText(logPath).contains("open file limit is below what --max-connections needs"))

        let first = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 5)
        #expect(try first.roundTrip("PING\n") == "PONG")
        // More connections than descriptors: the kernel queues them; the server cannot take them all.
        var crowd: [ProfileConnection] = []
        for _ in 0..<60 { crowd.append(try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 5)) }
        try waitFor { readText(logPath).contains("pausing accepts") }
        // The connection it already has is still served.
        #expect(try first.roundTrip("PING\n") == "PONG")
        // Descriptors free up: the waiting connections are taken and answered.
        crowd.removeAll()
        let late = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 5)
        #expect(try late.roundTrip("PING\n") == "PONG")
    }
}
