import Glibc

// What the tests of the RESP front share: a throw-away redis-server to compare with, and
// running outside clients (redis-cli, redis-benchmark, Python scripts) with a time limit.

/// A redis-server started on a free loopback port with nothing saved (`--save ''`,
/// `--appendonly no`), in a directory of its own, and set up to answer as profiled's RESP
/// front promises to: one database (so `SELECT 1` is refused), and hashes kept in insertion
/// order up to profiled's longest values (Redis keeps that order only in a hash's compact
/// encoding, by default for values of at most 64 bytes; a profile's portraitUri may have
/// 2,048). Killed, and its directory removed, when released.
///
/// Threading: one test uses it; any thread.
public final class RedisServer {
    public let directory: String
    public private(set) var port: UInt16 = 0
    private var pid: pid_t = 0

    /// Starts `redis-server` (from PATH) with `arguments` after the defaults, and waits until
    /// it accepts connections.
    public init(_ arguments: [String] = []) throws {
        directory = try makeTemporaryDirectory()
        let logPath = directory + "/redis-server.log"
        // Another process may take the free port before redis-server binds it: try again.
        for _ in 0..<5 {
            port = try freeLoopbackPort()
            let defaults = ["redis-server", "--port", "\(port)", "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--databases", "1", "--hash-max-listpack-value", "4096",
                            "--dir", directory, "--logfile", ""]
            let logSoFar = readText(logPath).utf8.count
            pid = try spawn("/usr/bin/env", args: defaults + arguments, stderrPath: logPath)
            let deadline = monotonicNow() + 10
            while monotonicNow() < deadline {
                let log = String(decoding: readText(logPath).utf8.dropFirst(logSoFar), as: UTF8.self)
                if log.contains("Ready to accept connections") { return }
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid {
                    pid = 0
                    guard log.contains("Address already in use") else {
                        throw TestFailure("redis-server exited at start (status \(exitCode(status))): \(log)")
                    }
                    break
                }
                usleep(5000)
            }
            if pid > 0 {
                throw TestFailure("redis-server did not get ready within 10 s: \(readText(logPath))")
            }
        }
        throw TestFailure("redis-server found no free port in 5 tries: \(readText(logPath))")
    }

    deinit {
        if pid > 0 {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
        removeDirectory(directory)
    }
}

/// A port on 127.0.0.1 that was free a moment ago: bound with port 0, read, and closed.
public func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw TestFailure("cannot bind a loopback port: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: address.sin_port)
}

/// How a command run by `runCommand` ended and what it printed.
public struct CommandOutput: CustomStringConvertible {
    /// The exit code, or minus the signal that killed it.
    public let status: Int32
    public let stdout: String
    public let stderr: String

    public var description: String { "exit status \(status)\n--- stdout:\n\(stdout)\n--- stderr:\n\(stderr)" }
}

/// Runs a program found on PATH (`arguments[0]`) with the rest of `arguments`, to completion.
///
/// - Parameters:
///   - stdinPath: What the program reads.
///   - timeoutSeconds: Past this the program is killed, and the call throws with what it
///     printed: a client that waits forever on a wrong server must not hang the suite.
public func runCommand(_ arguments: [String], stdinPath: String = "/dev/null", timeoutSeconds: Double = 60) throws -> CommandOutput {
    let directory = try makeTemporaryDirectory()
    defer { removeDirectory(directory) }
    let stdoutPath = directory + "/stdout"
    let stderrPath = directory + "/stderr"
    let pid = try spawn("/usr/bin/env", args: arguments, stderrPath: stderrPath, stdoutPath: stdoutPath, stdinPath: stdinPath)
    let deadline = monotonicNow() + timeoutSeconds
    var status: Int32 = 0
    while true {
        let waited = waitpid(pid, &status, WNOHANG)
        if waited == pid { break }
        if waited < 0 && errno != EINTR { throw TestFailure("waitpid: \(String(cString: strerror(errno)))") }
        if monotonicNow() > deadline {
            kill(pid, SIGKILL)
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            throw TestFailure("\(arguments.joined(separator: " ")) did not finish within \(timeoutSeconds) s and was killed\n"
                              + "--- stdout:\n\(readText(stdoutPath))\n--- stderr:\n\(readText(stderrPath))")
        }
        usleep(2000)
    }
    return CommandOutput(status: exitCode(status), stdout: readText(stdoutPath), stderr: readText(stderrPath))
}

/// The path of `relative` in this repository, found from the calling test file's own path
/// (`Tests/<Target>/<File>.swift`).
public func repositoryPath(_ relative: String, file: String = #filePath) -> String {
    var parts = file.split(separator: "/", omittingEmptySubsequences: false)
    parts.removeLast(3)
    return parts.joined(separator: "/") + "/" + relative
}

private func monotonicNow() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
