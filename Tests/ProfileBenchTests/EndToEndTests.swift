import ProfileTestSupport
import Glibc
import Testing
@testable import ProfileBench
import ProfileClient

@Suite("Against a server", .serialized)
struct EndToEndTests {
    @Test func aShortMixedRunAgainstProfiledHasNoErrors() throws {
        let server = try TestServer(["--threads", "1", "--cache-mb", "8"])
        defer { server.stop() }
        var options = BenchOptions()
        options.port = server.port
        options.connections = 4
        options.pipeline = 4
        options.durationSeconds = 1
        options.keys = 2000
        options.preload = true
        options.warm = true
        options.mix = try OperationMix.parse("get=70,mget=5,set=10,update=5,del=2,exists=8,count=1,stats=1,recent=1,scan=1")
        options.missRatio = 0.1
        let result = try LoadTest.run(options)
        #expect(result.failure == nil)
        #expect(result.firstError == nil)
        #expect(result.succeeded)
        #expect(result.preload?.profiles == 2000)
        #expect(result.preload?.errors == 0)
        #expect(result.warm?.profiles == 2000)
        #expect(result.warm?.errors == 0)
        #expect(result.json.contains("\"warm\":{\"ids\":2000,"))
        #expect(result.text.contains("warm: 2,000 ids read in"))
        #expect(result.total.errors == 0)
        #expect(result.total.requests > 0)
        #expect(result.operations.map(\.operation) == Operation.allCases.filter { $0 != .hmget })
        #expect(result.total.hits > 0 && result.total.hits < result.total.keys, "some lookups were of missing ids")
        #expect(result.json.contains("\"succeeded\":true"))
        let stats = try server.connect().stats()
        #expect(stats.first { $0.name == "errors" }?.value == "0")
    }

    @Test func anOpenLoopRunSendsTheRequestsAsked() throws {
        let server = try TestServer(["--threads", "1"])
        defer { server.stop() }
        var options = BenchOptions()
        options.port = server.port
        options.connections = 2
        options.requests = 200
        options.rate = 2000
        options.keys = 100
        let result = try LoadTest.run(options)
        #expect(result.succeeded)
        #expect(result.total.requests == 200)
        #expect(result.total.hits == 0, "nothing was preloaded")
    }

    @Test func aTokenAuthenticatesEveryConnection() throws {
        let directory = try makeTemporaryDirectory()
        let tokens = directory + "/tokens"
        let file = fopen(tokens, "w")!
        fputs("read reader-token\n", file)
        fclose(file)
        let server = try TestServer(["--threads", "1", "--tokens", tokens], directory: directory)
        defer { server.stop() }
        var options = BenchOptions()
        options.port = server.port
        options.connections = 2
        options.requests = 100
        options.token = "reader-token"
        #expect(try LoadTest.run(options).succeeded)
        options.token = "wrong"
        #expect(throws: BenchFailure.self) { try LoadTest.run(options) }
        do {
            _ = try LoadTest.run(options)
        } catch {
            #expect(error.message.hasPrefix("profiled://127.0.0.1:\(server.port) refused AUTH: \"ERROR DENIED"), "\(error.message)")
        }
    }

    /// Over TLS, with a client certificate the server requires, on both fronts; a CA that
    /// does not match the server's certificate stops the run before any load.
    @Test func aRunOverTLSOnBothFronts() throws {
        let certificates = try TestCertificates.shared()
        let server = try TestServer(["--threads", "1", "--tls-port", "0", "--resp-tls-port", "0",
                                     "--tls-cert-file", certificates.serverCertificate, "--tls-key-file", certificates.serverKey,
                                     "--tls-ca-cert-file", certificates.caCertificate])
        defer { server.stop() }
        var options = BenchOptions()
        options.port = server.tlsPort
        options.connections = 2
        options.pipeline = 16
        options.requests = 2000
        options.preload = true
        options.keys = 500
        options.mix = OperationMix([(.get, 80), (.set, 10), (.mget, 10)])
        options.tls = TLSClientOptions(caCertificateFile: certificates.caCertificate, certificateFile: certificates.clientCertificate,
                                       keyFile: certificates.clientKey)
        let line = try LoadTest.run(options)
        #expect(line.succeeded && line.total.requests == 2000 && line.total.hits > 0, "\(line)")
        options.target = .resp
        options.port = server.respTLSPort
        options.mix = OperationMix([(.get, 90), (.set, 10)])
        let resp = try LoadTest.run(options)
        #expect(resp.succeeded && resp.total.requests == 2000, "\(resp)")
        options.tls?.caCertificateFile = certificates.otherCACertificate
        #expect(throws: BenchFailure.self) { try LoadTest.run(options) }
        options.tls?.caCertificateFile = certificates.directory + "/missing.crt"
        do {
            _ = try LoadTest.run(options)
            Issue.record("a run with a CA file that is not there started")
        } catch {
            #expect(error.message == "cannot read the CA certificate file \(certificates.directory)/missing.crt: No such file or directory")
        }
    }

    @Test func aRefusedConnectionIsReported() throws {
        var options = BenchOptions()
        options.port = try unusedPort()
        options.connections = 1
        #expect(throws: BenchFailure.self) { try LoadTest.run(options) }
        do {
            _ = try LoadTest.run(options)
        } catch {
            #expect(error.message.contains(":\(options.port!): no server is listening there (Connection refused)"), "\(error.message)")
        }
    }

    @Test func garbageStopsTheRunAndShowsTheBytes() throws {
        let fake = try FakeServer(answer: "HTTP/1.1 400 Bad Request\r\n")
        var options = BenchOptions()
        options.port = fake.port
        options.connections = 1
        options.durationSeconds = 5
        let result = try LoadTest.run(options)
        #expect(!result.succeeded)
        #expect(result.failure == "profiled://127.0.0.1:\(fake.port) answered garbage to get: "
                + "unexpected reply to lookup: \"HTTP/1.1 400 Bad Request\\r\\n\"")
        // Over the few milliseconds the run lasted, the threads' start-up is no share of a core.
        #expect(result.wallSeconds < 0.1)
        #expect(result.text.contains("(too short a run for a share)"), "\(result.text)")
        #expect(result.json.contains("\"cpuShareOfOneCore\":null"), "\(result.json)")
    }

    @Test func aClosedConnectionStopsTheRunWithItsLastWords() throws {
        let fake = try FakeServer(answer: "ERROR BUSY too many connections\n")
        var options = BenchOptions()
        options.port = fake.port
        options.connections = 1
        options.pipeline = 2
        options.durationSeconds = 5
        let result = try LoadTest.run(options)
        #expect(!result.succeeded)
        #expect(result.total.errors == 1)
        #expect(result.firstError == "get: \"ERROR BUSY too many connections\\n\"")
        let failure = result.failure ?? "no failure"
        #expect(failure.hasPrefix("profiled://127.0.0.1:\(fake.port) closed a connection with "), "\(failure)")
        #expect(failure.hasSuffix("; first error reply: get: \"ERROR BUSY too many connections\\n\""), "\(failure)")
    }
}

/// A port nothing listens on: bound once to find a free one, then closed.
func unusedPort() throws -> UInt16 {
    let listener = try FakeServer.listen()
    defer { close(listener.fd) }
    return listener.port
}

/// A one-connection server on loopback that waits for a request, sends a fixed answer and
/// closes, so tests can see how the harness takes a server that misbehaves.
final class FakeServer: Sendable {
    let port: UInt16
    private let fd: Int32

    init(answer: String) throws {
        (fd, port) = try Self.listen()
        let context = Unmanaged.passRetained(Job(fd: fd, answer: Array(answer.utf8))).toOpaque()
        var thread = pthread_t()
        pthread_create(&thread, nil, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            let client = accept(job.fd, nil, nil)
            var request = [UInt8](repeating: 0, count: 4096)
            _ = recv(client, &request, request.count, 0)
            _ = job.answer.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            close(client)
            close(job.fd)
            return nil
        }, context)
        pthread_detach(thread)
    }

    final class Job: Sendable {
        let fd: Int32
        let answer: [UInt8]
        init(fd: Int32, answer: [UInt8]) { self.fd = fd; self.answer = answer }
    }

    static func listen() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && Glibc.listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw TestFailure("cannot listen on loopback: \(String(cString: strerror(errno)))") }
        return (fd, UInt16(bigEndian: address.sin_port))
    }
}
