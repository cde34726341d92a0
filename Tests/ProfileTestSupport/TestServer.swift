import Glibc
import ProfileClient

/// A profiled process started from the built executable, on a free port and a throw-away
/// store, for black-box tests that talk to it as a client would.
public final class TestServer {
    public let directory: String
    public let databasePath: String
    public let logPath: String
    public let arguments: [String]
    /// A command profiled runs under, such as `setpriv` to run it as another user; it must
    /// exec profiled in its own process, so that `pid` is profiled's.
    public let launcher: [String]
    private let ownsDirectory: Bool
    public private(set) var pid: pid_t = 0
    public private(set) var port: UInt16 = 0
    public var endpoint: Endpoint { .tcp(host: "127.0.0.1", port: port) }

    /// Starts profiled with `arguments` (plus `--port 0` and a throw-away store unless given)
    /// and waits until it logs where it listens. The store is a temporary file (`--db`), or,
    /// when `PROFILED_TEST_STORE` is `postgres`, a fresh database in the test PostgreSQL
    /// (`--postgres`): so the protocol's tests run against both kinds of node.
    public init(_ arguments: [String] = [], directory: String? = nil, environment: [String: String] = [:],
                launcher: [String] = []) throws {
        ownsDirectory = directory == nil
        self.launcher = launcher
        self.directory = try directory ?? makeTemporaryDirectory()
        databasePath = self.directory + "/profiles.sqlite3"
        logPath = self.directory + "/profiled-\(UInt32.random(in: 0...UInt32.max)).log"
        var args = arguments
        if !args.contains("--port") { args += ["--port", "0"] }
        if !args.contains("--db") && !args.contains("--postgres") && environment.isEmpty {
            args += ProfileTestSupport.testStoreIsPostgres ? ["--postgres", try makeTestDatabase()] : ["--db", databasePath]
        }
        // Over TLS, the line protocol's (and RESP's) TLS listeners come beside the plain ones,
        // and `connect` uses TLS: so the protocol's tests run over both transports.
        if testTransportIsTLS && !args.contains(where: { $0.hasPrefix("--tls-") || $0.hasPrefix("--resp-tls-") }) {
            let certificates = try TestCertificates.shared()
            args += ["--tls-port", "0", "--tls-cert-file", certificates.serverCertificate,
                     "--tls-key-file", certificates.serverKey]
            if args.contains(where: { $0.hasPrefix("--resp-port") }) { args += ["--resp-tls-port", "0"] }
        }
        self.arguments = args
        try start(environment: environment)
    }

    /// (Re)starts the process with the same arguments and store.
    public func start(environment: [String: String] = [:]) throws {
        let logSoFar = readText(logPath).utf8.count
        pid = launcher.isEmpty
            ? try spawn(executable("profiled"), args: arguments, stderrPath: logPath, environment: environment)
            : try spawn(launcher[0], args: Array(launcher.dropFirst()) + [executable("profiled")] + arguments,
                        stderrPath: logPath, environment: environment)
        let ports = try waitForListening(after: logSoFar)
        port = ports[.line] ?? 0
        respPort = ports[.resp] ?? 0
        tlsPort = ports[.lineTLS] ?? 0
        respTLSPort = ports[.respTLS] ?? 0
    }

    /// The TLS listeners' ports, when started with `--tls-port` or `--resp-tls-port`; else 0.
    public private(set) var tlsPort: UInt16 = 0
    public private(set) var respTLSPort: UInt16 = 0

    /// A listener as the log names it.
    enum Listener: Hashable {
        case line, resp, lineTLS, respTLS

        /// The listener a `listening` log line is about.
        init(logLine text: Substring) {
            switch (text.contains("proto=resp"), text.contains("tls=yes")) {
            case (false, false): self = .line
            case (true, false): self = .resp
            case (false, true): self = .lineTLS
            case (true, true): self = .respTLS
            }
        }

        var flag: String {
            switch self {
            case .line: "--port"
            case .resp: "--resp-port"
            case .lineTLS: "--tls-port"
            case .respTLS: "--resp-tls-port"
            }
        }
    }

    /// The listeners the arguments turn on: the line protocol's unless `--port off`, and each
    /// other one whose port is given and not `off`.
    private var expectedListeners: Set<Listener> {
        var expected: Set<Listener> = []
        for listener in [Listener.line, .resp, .lineTLS, .respTLS] {
            let value = arguments.firstIndex(of: listener.flag).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
                ?? arguments.first { $0.hasPrefix(listener.flag + "=") }.map { String($0.dropFirst(listener.flag.count + 1)) }
            if value == "off" { continue }
            if value != nil || listener == .line { expected.insert(listener) }
        }
        return expected
    }

    /// Whether this node's store is a PostgreSQL database.
    public var isOverPostgres: Bool { arguments.contains("--postgres") }

    /// Over PostgreSQL, waits (at most 20 s) until a heartbeat has come back and the node's
    /// cache is vouched for (docs/CLUSTER.md): a read then no longer counts in
    /// `lease_expired_reads`. Until then the node tells its tracking clients to drop everything
    /// every lease, which a test of pushes must not meet. Returns at once over a store file.
    public func waitForLease() throws {
        guard isOverPostgres else { return }
        let client = try connect()
        func expiredReads() throws -> String { try client.stats().first { $0.name == "lease_expired_reads" }?.value ?? "" }
        for _ in 0..<400 {
            let before = try expiredReads()
            _ = try client.get(Array("lease-probe".utf8))
            if try expiredReads() == before { return }
            usleep(50_000)
        }
        throw TestFailure("no heartbeat came back in 20 s: \(log)")
    }

    /// The RESP listener's port, when started with `--resp-port`; else 0.
    public private(set) var respPort: UInt16 = 0

    /// Waits for this run's `listening` lines (the log also holds earlier runs' lines): the line
    /// protocol's TCP port, and RESP's when asked for.
    private func waitForListening(after offset: Int) throws -> [Listener: UInt16] {
        let expected = expectedListeners
        for _ in 0..<2000 {
            let log = String(decoding: readText(logPath).utf8.dropFirst(offset), as: UTF8.self)
            var ports: [Listener: UInt16] = [:]
            for text in log.split(separator: "\n") where text.contains("msg=listening") && !text.contains("addr=unix:") {
                let port = UInt16(String(text.reversed().prefix { $0.isNumber }.reversed()))
                let listener = Listener(logLine: text)
                if ports[listener] == nil { ports[listener] = port }
            }
            if expected.isSubset(of: Set(ports.keys)) { return ports }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                pid = 0
                throw TestFailure("profiled exited early: \(log)")
            }
            usleep(5000)
        }
        throw TestFailure("profiled did not start listening: \(readText(logPath))")
    }

    /// A client connection: over TLS to the TLS listener when the tests run over TLS and the
    /// server has one (`PROFILED_TEST_TLS`), else in clear.
    public func connect() throws -> ProfileConnection {
        guard testTransportIsTLS && tlsPort != 0 else { return try ProfileConnection(endpoint, timeoutSeconds: 20) }
        return try ProfileConnection(.tcp(host: "127.0.0.1", port: tlsPort), timeoutSeconds: 20,
                                     tls: TLSClientOptions(caCertificateFile: try TestCertificates.shared().caCertificate))
    }

    /// Sends a signal and waits for the exit; returns the wait status.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) -> Int32 {
        guard pid > 0 else { return -1 }
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        pid = 0
        return status
    }

    /// Waits up to `seconds` for the process to exit on its own (after a signal sent some other
    /// way); returns the wait status, or nil when it is still running.
    public func waitForExit(seconds: Double) -> Int32? {
        guard pid > 0 else { return nil }
        var start = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        while true {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                pid = 0
                return status
            }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            if Double(now.tv_sec - start.tv_sec) + Double(now.tv_nsec - start.tv_nsec) / 1e9 > seconds { return nil }
            usleep(1000)
        }
    }

    public var log: String { readText(logPath) }

    deinit {
        if pid > 0 { stop(signal: SIGKILL) }
        if ownsDirectory { removeDirectory(directory) }
    }
}

/// Removes a flat directory of files (what the tests make), then the directory.
public func removeDirectory(_ path: String) {
    guard let dir = opendir(path) else { return }
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { unlink(path + "/" + name) }
    }
    closedir(dir)
    rmdir(path)
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The directory holding the built executables (next to the test bundle).
public func executable(_ name: String) -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    let path = String(decoding: buffer[0..<max(0, n)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
    return directory + "/" + name
}

public func makeTemporaryDirectory() throws -> String {
    // $TMPDIR when set, else the C library's temporary directory.
    let base = getenv("TMPDIR").map { String(cString: $0) } ?? P_tmpdir
    var template = Array((base + "/profiled-test-XXXXXX").utf8CString)
    guard let result = mkdtemp(&template) else { throw TestFailure("mkdtemp failed") }
    return String(cString: result)
}

/// A whole file's bytes; nil when it cannot be opened.
public func readBytes(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&chunk, 1, chunk.count, file)
        if n <= 0 { break }
        result.append(contentsOf: chunk[0..<n])
    }
    return result
}

/// A whole file as text; empty when it cannot be opened.
public func readText(_ path: String) -> String {
    String(decoding: readBytes(path) ?? [], as: UTF8.self)
}

public func writeText(_ path: String, _ text: String) {
    let file = fopen(path, "w")!
    fputs(text, file)
    fclose(file)
}

/// Starts `path` with `args`, stdin from `stdinPath`, stdout and stderr appended to
/// `stderrPath` unless `stdoutPath` names a file of their own.
public func spawn(_ path: String, args: [String], stderrPath: String, stdoutPath: String? = nil,
           stdinPath: String = "/dev/null", environment: [String: String] = [:]) throws -> pid_t {
    try spawn(path, rawArgs: args.map { Array($0.utf8) }, stderrPath: stderrPath, stdoutPath: stdoutPath,
              stdinPath: stdinPath, environment: environment)
}

/// `spawn` with arguments as bytes, which need not be valid UTF-8.
public func spawn(_ path: String, rawArgs: [[UInt8]], stderrPath: String, stdoutPath: String? = nil,
                  stdinPath: String = "/dev/null", environment: [String: String] = [:]) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, stdinPath, O_RDWR, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdoutPath ?? stderrPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    var env: [String] = []
    if environment.isEmpty {
        var p = environ
        while let entry = p.pointee {
            env.append(String(cString: entry))
            p += 1
        }
    } else {
        env = ["PATH=/usr/bin:/bin"] + environment.map { "\($0.key)=\($0.value)" }
    }
    let argv = ([Array(path.utf8)] + rawArgs).map { bytes in
        (bytes.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { strdup($0.baseAddress!) }
    } + [nil]
    let envp = env.map { strdup($0) } + [nil]
    defer {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
    }
    // The test runner's threads may block or ignore signals; the child must start clean.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for s in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&defaults, s) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
    guard rc == 0 else { throw TestFailure("cannot start \(path): \(String(cString: strerror(rc)))") }
    return pid
}


/// Runs an executable to completion; returns its exit code and everything it printed.
public func runToCompletion(_ path: String, _ args: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let directory = try makeTemporaryDirectory()
    defer { removeDirectory(directory) }
    let outputPath = directory + "/output"
    let pid = try spawn(path, args: args, stderrPath: outputPath, environment: environment)
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let exitCode = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    return (exitCode, readText(outputPath))
}

/// Whether the protocol's tests run over TLS (`PROFILED_TEST_TLS=1`): `TestServer` then adds
/// TLS listeners and connects to them.
public var testTransportIsTLS: Bool {
    getenv("PROFILED_TEST_TLS").map { String(cString: $0) == "1" } ?? false
}

/// Whether `PROFILED_TEST_STORE` asks for nodes over PostgreSQL.
public var testStoreIsPostgres: Bool {
    getenv("PROFILED_TEST_STORE").map { String(cString: $0) } == "postgres"
}

/// The exit code from a wait status, or -signal when it was killed.
public func exitCode(_ status: Int32) -> Int32 {
    (status & 0x7f) == 0 ? (status >> 8) & 0xff : -(status & 0x7f)
}

extension ProfileConnection {
    /// Sends raw text and reads one reply line as text.
    public func roundTrip(_ text: String) throws -> String {
        sendRaw(Array(text.utf8))
        try flush()
        return String(decoding: try readLine(), as: UTF8.self)
    }

    /// Reads one reply line as text.
    public func line() throws -> String {
        String(decoding: try readLine(), as: UTF8.self)
    }
}

/// A value several threads share, behind a pthread mutex: ThreadSanitizer cannot see the futex
/// handoff in Synchronization's Mutex and would report every use of it. Thread-safe.
public final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
