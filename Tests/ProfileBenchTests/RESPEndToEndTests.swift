import ProfileTestSupport
import Glibc
import Testing
@testable import ProfileBench

/// The hash workload (`resp://`) against a real redis-server, the peer profiled's RESP front is
/// measured against.
@Suite("Hash workload against redis-server", .serialized)
struct RESPEndToEndTests {
    func options(_ redis: RedisServer, _ target: TargetProtocol = .resp) -> BenchOptions {
        var options = BenchOptions()
        options.target = target
        options.port = redis.port
        options.connections = 4
        options.pipeline = 8
        options.keys = 2000
        options.valueSize = 40
        return options
    }

    @Test func preloadWritesHashesAndAMixedRunCountsWhatItFound() throws {
        let redis = try RedisServer()
        defer { redis.stop() }
        var load = options(redis)
        load.preload = true
        load.warm = true
        load.requests = 1
        let loaded = try LoadTest.run(load)
        #expect(loaded.succeeded, "\(loaded.text)")
        #expect(loaded.preload?.profiles == 2000 && loaded.preload?.errors == 0)
        #expect(loaded.warm?.profiles == 2000 && loaded.warm?.errors == 0)
        #expect(loaded.operations.first?.stats.hits == 1)
        #expect(loaded.json.contains("\"target\":\"resp\""))

        let space = KeySpace(keys: 2000, valueSize: 40)
        let name = String(decoding: space.name, as: UTF8.self)
        let uri = String(decoding: space.portraitUri, as: UTF8.self)
        #expect(try redis.command("DBSIZE") == ":2000\r\n")
        #expect(try redis.command("TYPE", "u00001999") == "+hash\r\n")
        #expect(try redis.command("HGETALL", "u00000000")
                == "*4\r\n$4\r\nname\r\n$\(name.utf8.count)\r\n\(name)\r\n$11\r\nportraitUri\r\n$\(uri.utf8.count)\r\n\(uri)\r\n")

        var mixed = options(redis)
        mixed.requests = 4000
        mixed.mix = try OperationMix.parse("get=40,hmget=20,set=10,update=10,del=5,exists=15")
        mixed.missRatio = 0.25
        let result = try LoadTest.run(mixed)
        #expect(result.succeeded, "\(result.text)")
        #expect(result.total.requests == 4000)
        #expect(result.total.errors == 0 && result.firstError == nil)
        #expect(result.operations.map(\.operation) == [.get, .hmget, .set, .update, .del, .exists])
        for entry in result.operations where entry.operation.isLookup {
            // About a quarter of the ids looked up do not exist: both counts must show.
            let s = entry.stats
            #expect(s.hits > 0 && s.notFound > 0 && s.hits + s.notFound == s.requests, "\(entry.operation): \(s.hits) found, \(s.notFound) not")
        }
        let deletes = try #require(result.operations.first { $0.operation == .del }?.stats)
        #expect(deletes.requests > 0 && deletes.notFound < deletes.requests, "some DELs found their hash")
    }

    @Test func errorRepliesAreCountedAndTheFirstIsShown() throws {
        let redis = try RedisServer()
        defer { redis.stop() }
        // The string workload's preload leaves a string under every id: HGETALL of one is an error.
        var strings = options(redis, .redis)
        strings.preload = true
        strings.requests = 1
        #expect(try LoadTest.run(strings).succeeded)
        var hashes = options(redis)
        hashes.requests = 50
        let result = try LoadTest.run(hashes)
        #expect(!result.succeeded)
        #expect(result.failure == nil, "error replies do not stop the run")
        #expect(result.total.requests == 50 && result.total.errors == 50)
        #expect(result.firstError == "get: \"-WRONGTYPE Operation against a key holding the wrong kind of value\\r\\n\"")
    }

    @Test func aTokenIsSentAsAUTHFirstOnEveryConnection() throws {
        let redis = try RedisServer(["--requirepass", "s3cret"])
        defer { redis.stop() }
        var load = options(redis)
        load.requests = 100
        load.mix = try OperationMix.parse("get=1,set=1")
        load.token = "s3cret"
        let result = try LoadTest.run(load)
        #expect(result.succeeded, "\(result.text)")
        #expect(result.total.requests == 100)

        load.token = nil
        let unauthenticated = try LoadTest.run(load)
        #expect(unauthenticated.total.errors == 100)
        #expect(unauthenticated.firstError?.contains("-NOAUTH Authentication required.") == true, "\(unauthenticated.text)")

        load.token = "wrong"
        let refusal = #expect(throws: BenchFailure.self) { try LoadTest.run(load) }
        #expect(refusal?.message == "resp://127.0.0.1:\(redis.port) refused AUTH: "
                + "\"-WRONGPASS invalid username-password pair or user is disabled.\\r\\n\"")
    }
}

/// A throw-away redis-server on a free loopback port that keeps nothing on disk (`--save ''`,
/// no append-only file), in a temporary directory. `stop` (or the end of its last use) kills it.
final class RedisServer {
    let port: UInt16
    private var pid: pid_t
    private let directory: String

    init(_ arguments: [String] = []) throws {
        let searchPath = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        let candidates: [String] = searchPath.split(separator: ":").map { "\($0)/redis-server" }
        guard let executable = candidates.first(where: { access($0, X_OK) == 0 }) else {
            throw TestFailure("redis-server is not installed (Scripts/test installs it)")
        }
        directory = try makeTemporaryDirectory()
        port = try unusedPort()
        let log = directory + "/redis.log"
        pid = try spawn(executable, args: ["--bind", "127.0.0.1", "--port", "\(port)", "--save", "", "--appendonly", "no",
                                           "--dir", directory, "--daemonize", "no"] + arguments, stderrPath: log)
        for _ in 0..<1000 {
            if let pong = try? command("PING"), pong == "+PONG\r\n" || pong.hasPrefix("-NOAUTH") { return }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                pid = 0
                throw TestFailure("redis-server exited early: \(readText(log))")
            }
            usleep(10_000)
        }
        stop()
        throw TestFailure("redis-server did not answer PING within 10 s: \(readText(log))")
    }

    /// Sends one command and returns its whole reply as text.
    func command(_ arguments: String...) throws -> String {
        var options = BenchOptions()
        options.port = port
        let fd = try openConnection(options)
        defer { close(fd) }
        var request = "*\(arguments.count)\r\n"
        for argument in arguments { request += "$\(argument.utf8.count)\r\n\(argument)\r\n" }
        let bytes = Array(request.utf8)
        guard bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count else {
            throw TestFailure("cannot send \(arguments) to redis-server: \(errnoText())")
        }
        var reply: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let whole = reply.withUnsafeBytes { raw -> Bool in
                if case .element = RESPReplyParser.scan(raw, at: 0, depth: 0) { return true }
                return false
            }
            if whole { return String(decoding: reply, as: UTF8.self) }
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else { throw TestFailure("redis-server closed the connection after \(arguments)") }
            reply += chunk[0..<n]
        }
    }

    func stop() {
        guard pid > 0 else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        pid = 0
    }

    deinit {
        stop()
        removeDirectory(directory)
    }
}
