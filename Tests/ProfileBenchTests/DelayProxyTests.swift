import Glibc
import ProfileClient
import ProfileTestSupport
import Testing

/// Scripts/delay-proxy.c, which Scripts/bench --client-cache --rtt-us puts between the client
/// and the server: it refuses bad arguments, and passes every byte both ways, in order, no
/// sooner than the round trip it was given.
@Suite(.serialized) struct DelayProxyTests {
    /// Builds the proxy with the machine's C compiler (the toolchain's clang when there is no cc).
    private func build(into directory: String) throws -> String {
        let binary = directory + "/delay-proxy"
        let source = repositoryPath("Scripts/delay-proxy.c")
        let (status, output) = try runToCompletion(
            "/bin/sh", ["-c", "CC=$(command -v cc || command -v clang) && \"$CC\" -O2 -o \"$0\" \"$1\" >&2", binary, source],
            environment: ["PATH": "/usr/bin:/bin:/opt/swift/usr/bin:/usr/share/swift/usr/bin:/usr/local/swift/usr/bin"])
        try #require(status == 0, "\(output)")
        return binary
    }

    @Test func badArgumentsStopWithTheUsageLine() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let proxy = try build(into: directory)
        for arguments in [[], ["1", "2"], ["x", "2", "3"], ["1", "0", "3"], ["1", "2", "-1"], ["65536", "2", "3"],
                          ["1", "2", "10000001"], ["1", "2", "3x"]] {
            let (status, output) = try runToCompletion(proxy, arguments)
            #expect(status == 64, "\(arguments): \(output)")
            #expect(output == "usage: delay-proxy LISTEN_PORT UPSTREAM_PORT RTT_MICROSECONDS (0 to 10000000)\n",
                    "\(arguments): \(output)")
        }
    }

    @Test func requestsAndRepliesPassInOrderAfterTheRoundTrip() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let proxy = try build(into: directory)
        let server = try TestServer()
        let roundTripMicroseconds = 50_000
        let pid = try spawn(proxy, args: ["0", "\(server.port)", "\(roundTripMicroseconds)"],
                            stderrPath: directory + "/proxy.err", stdoutPath: directory + "/proxy.out")
        defer {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        var port: UInt16? = nil
        for _ in 0..<500 where port == nil {
            let text = readText(directory + "/proxy.out")
            if text.hasPrefix("listening on "), text.hasSuffix("\n") {
                port = UInt16(text.dropFirst("listening on ".count).dropLast())
            } else {
                usleep(10_000)
            }
        }
        let proxyPort = try #require(port, "the proxy printed no port: \(readText(directory + "/proxy.err"))")
        let connection = try ProfileConnection(.tcp(host: "127.0.0.1", port: proxyPort))
        let started = secondsNow()
        try connection.ping()
        #expect(secondsNow() - started >= Double(roundTripMicroseconds) / 1e6)
        // Requests and replies of tens of KiB, many chunks each way: every byte arrives, in order.
        let profiles = (0..<2000).map { n in
            Profile(userId: "u\(n)", name: "name \(n) " + String(repeating: "n", count: 40), portraitUri: "https://cdn.example/\(n).jpg")
        }
        for first in stride(from: 0, to: profiles.count, by: 500) {
            #expect(try connection.mset(Array(profiles[first..<first + 500])) == 500)
        }
        for first in stride(from: 0, to: profiles.count, by: 500) {
            let wanted = profiles[first..<first + 500]
            #expect(try connection.mget(wanted.map(\.userId)) == wanted.map { Optional($0) })
        }
    }
}

private func secondsNow() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
