import ProfileTestSupport
import Testing

/// The RESP front against a real redis-server, byte for byte, wherever RESP.md promises
/// Redis's behaviour: Tests/RESPClients/resp_differential.py sends the same scripted
/// exchanges to both and prints every reply that differs, with its scenario and request.
/// Each test has a fresh profiled, since its keyspace is shared by all connections.
@Suite struct RESPDifferentialTests {
    static let script = repositoryPath("Tests/RESPClients/resp_differential.py")

    /// `subjectTLS`: reach the subject over TLS (a profiled's `--resp-tls-port`).
    static func differential(reference: UInt16, subject: UInt16, subjectTLS: Bool = false, token: String? = nil) throws -> CommandOutput {
        var arguments = ["python3", script, "--reference", "127.0.0.1:\(reference)", "--subject", "127.0.0.1:\(subject)"]
        if let token { arguments += ["--token", token] }
        if subjectTLS { arguments += ["--subject-tls-ca", try TestCertificates.shared().caCertificate] }
        return try runCommand(arguments, timeoutSeconds: 120)
    }

    @Test func sameRepliesAsRedis() throws {
        let redis = try RedisServer()
        let server = try TestServer(["--resp-port", "0"])
        let run = try Self.differential(reference: redis.port, subject: server.respFrontPort, subjectTLS: testTransportIsTLS)
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(server.log)")
    }

    /// With tokens (a password on redis-server): every connection authenticates first, and the
    /// replies before AUTH, to wrong tokens and past the unauthenticated limits are compared too.
    @Test func sameRepliesAsRedisWithAuthentication() throws {
        let redis = try RedisServer(["--requirepass", "admin-token"])
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        writeText(directory + "/tokens", "admin admin-token\n")
        let server = try TestServer(["--resp-port", "0", "--tokens", directory + "/tokens"])
        let run = try Self.differential(reference: redis.port, subject: server.respFrontPort, subjectTLS: testTransportIsTLS,
                                         token: "admin-token")
        #expect(run.status == 0, "\(run)\n--- profiled's log:\n\(server.log)")
    }

    /// Two redis-servers agree on every scenario: the harness compares only what is
    /// deterministic, so a difference with profiled is profiled's.
    @Test func twoRedisServersAgree() throws {
        let reference = try RedisServer(["--requirepass", "admin-token"])
        let subject = try RedisServer(["--requirepass", "admin-token"])
        let run = try Self.differential(reference: reference.port, subject: subject.port, token: "admin-token")
        #expect(run.status == 0, "\(run)")
    }
}
