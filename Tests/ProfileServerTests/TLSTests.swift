import Glibc
import ProfileClient
import ProfileTLS
import ProfileTestSupport
import Testing

/// TLS on both fronts, against real clients: redis-cli, redis-benchmark and redis-py over
/// TLS, `openssl s_client` for the line protocol, profilectl and ProfileClient; certificates
/// made by `openssl` for each run.
@Suite struct TLSTests {
    /// profiled with both TLS listeners beside the plain ones, and `extra` arguments.
    static func start(_ certificates: TestCertificates, _ extra: [String] = [], directory: String? = nil) throws -> TestServer {
        try TestServer(["--resp-port", "0", "--tls-port", "0", "--resp-tls-port", "0",
                        "--tls-cert-file", certificates.serverCertificate, "--tls-key-file", certificates.serverKey] + extra,
                       directory: directory)
    }

    static func tlsConnection(_ server: TestServer, _ certificates: TestCertificates, certificate: String? = nil,
                              key: String? = nil) throws -> ProfileConnection {
        try ProfileConnection(.tcp(host: "127.0.0.1", port: server.tlsPort), timeoutSeconds: 10,
                              tls: TLSClientOptions(caCertificateFile: certificates.caCertificate,
                                                    certificateFile: certificate, keyFile: key))
    }

    /// One STATS counter, read over the plain listener.
    static func stat(_ server: TestServer, _ name: String) throws -> String? {
        try ProfileConnection(server.endpoint, timeoutSeconds: 10).stats().first { $0.name == name }?.value
    }

    static let redisPy = repositoryPath("Tests/RESPClients/redis_py_client.py")

    static func profilectl(_ arguments: [String]) throws -> CommandOutput {
        try runCommand([executable("profilectl")] + arguments, timeoutSeconds: 30)
    }

    @Test func bothFrontsServeRealClientsOverTLS() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates)
        let tlsCli = ["redis-cli", "--tls", "--cacert", certificates.caCertificate, "-h", "127.0.0.1", "-p", "\(server.respTLSPort)"]

        let line = try Self.tlsConnection(server, certificates)
        #expect(line.tlsVersion == "TLSv1.3")
        #expect(line.tlsPeerCommonName == "localhost")
        try line.set(Profile(userId: "tls-1", name: "Ada", portraitUri: "https://cdn.example/ada.png"))

        let hgetall = try runCommand(tlsCli + ["HGETALL", "tls-1"])
        #expect(hgetall.status == 0 && hgetall.stdout == "name\nAda\nportraitUri\nhttps://cdn.example/ada.png\n", "\(hgetall)")
        let hset = try runCommand(tlsCli + ["HSET", "tls-2", "name", "Grace", "portraitUri", "g"])
        #expect(hset.status == 0 && hset.stdout == "2\n", "\(hset)")
        #expect(try line.get(Array("tls-2".utf8)) == Profile(userId: "tls-2", name: "Grace", portraitUri: "g"))

        // The line protocol as openssl's own client speaks it; QUIT ends the session.
        let requests = try makeTemporaryDirectory()
        defer { removeDirectory(requests) }
        writeText(requests + "/in", "GET tls-2\nQUIT\n")
        let sClient = try runCommand(["openssl", "s_client", "-quiet", "-verify_return_error", "-CAfile", certificates.caCertificate,
                                      "-connect", "127.0.0.1:\(server.tlsPort)"], stdinPath: requests + "/in", timeoutSeconds: 20)
        #expect(sClient.stdout == "VALUE tls-2 Grace g\nBYE\n", "\(sClient)")

        let benchmark = try runCommand(["redis-benchmark", "--tls", "--cacert", certificates.caCertificate, "-h", "127.0.0.1",
                                        "-p", "\(server.respTLSPort)", "-n", "2000", "-c", "4", "-P", "16", "-r", "1000", "-q",
                                        "HSET", "bench:__rand_int__", "name", "x", "portraitUri", "y"], timeoutSeconds: 60)
        #expect(benchmark.status == 0, "\(benchmark)")

        let py = try runCommand(["python3", Self.redisPy, "--port", "\(server.respTLSPort)", "--tls-ca", certificates.caCertificate],
                                timeoutSeconds: 120)
        #expect(py.status == 0, "\(py)\n--- profiled's log:\n\(server.log)")

        let ctl = try Self.profilectl(["get", "tls-1", "--port", "\(server.tlsPort)", "--tls", "--cacert", certificates.caCertificate])
        #expect(ctl.status == 0 && ctl.stdout == "tls-1  Ada  https://cdn.example/ada.png\n", "\(ctl)")
        // A server certificate the client cannot check is refused by the client.
        let unchecked = try Self.profilectl(["get", "tls-1", "--port", "\(server.tlsPort)", "--tls",
                                        "--cacert", certificates.otherCACertificate])
        #expect(unchecked.status == 2 && unchecked.stderr.contains("certificate verify failed"), "\(unchecked)")
        // The name the certificate must carry is checked too.
        let wrongName = try Self.profilectl(["ping", "--port", "\(server.tlsPort)", "--tls", "--cacert", certificates.caCertificate,
                                        "--sni", "db.example"])
        #expect(wrongName.status == 2 && wrongName.stderr.contains("certificate verify failed"), "\(wrongName)")
        let insecure = try Self.profilectl(["ping", "--port", "\(server.tlsPort)", "--tls", "--insecure"])
        #expect(insecure.status == 0, "\(insecure)")
        // A CA file that is not there is named, with the reason once.
        let missing = requests + "/missing-ca.crt"
        let noCA = try Self.profilectl(["ping", "--port", "\(server.tlsPort)", "--tls", "--cacert", missing])
        #expect(noCA.status == 2 && noCA.stderr == "profilectl: cannot read the CA certificate file \(missing): No such file or directory\n",
                "\(noCA)")
    }

    /// The line protocol's pipelined replies larger than a TLS record, and a client that
    /// closes its side after its requests: every reply arrives, in order.
    @Test func largePipelinesAndAHalfCloseArriveWholeOverTLS() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates)
        let client = try Self.tlsConnection(server, certificates)
        let uri = String(repeating: "u", count: 2000)
        for i in 0..<200 { client.send("SET", ["big-\(i)", "Name \(i)", uri]) }
        try client.flush()
        for _ in 0..<200 { #expect(try client.readLine() == Array("STORED".utf8)) }
        client.send("MGET", (0..<200).map { "big-\($0)" })
        for i in 0..<200 { client.send("GET", ["big-\(i)"]) }
        try client.finishSending()
        for i in 0..<200 { #expect(try client.readLine() == Array("VALUE big-\(i) \"Name \(i)\" \(uri)".utf8)) }
        #expect(try client.readLine() == Array("END".utf8))
        for i in 0..<200 { #expect(try client.readLine() == Array("VALUE big-\(i) \"Name \(i)\" \(uri)".utf8)) }
        #expect(try client.isClosedByServer())
    }

    /// A line longer than `--max-line` over TLS is refused as in clear. The server holds no
    /// more than the limit, so it looks for the byte beyond it in the TLS session, where the
    /// byte may wait decrypted already or arrive later.
    @Test func aTooLongLineOverTLSIsRefusedAndClosed() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates, ["--max-line", "1024"])
        let c = try Self.tlsConnection(server, certificates)
        c.sendRaw(Array(("GET " + String(repeating: "a", count: 1021)).utf8))
        try c.flush()
        #expect(try c.line().hasPrefix("ERROR TOOLONG "))
        #expect(try c.isClosedByServer())
        try ServerErrorTests.expectTheByteBeyondTheLimitIsTooLong(on: try Self.tlsConnection(server, certificates))
    }

    /// A slow reader of a 9.3 MB MGET over TLS: its replies wait at the high-water mark as in
    /// clear (plus OpenSSL's buffers), and every record OpenSSL could not send at once is sent
    /// later from the same bytes, so the whole reply arrives in order.
    @Test func aSlowReaderOverTLSGetsALargeMGETWholeAndInOrder() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates)
        try EscapedProfiles.store(through: try ProfileConnection(server.endpoint, timeoutSeconds: 20))
        let fd = try rawLoopbackConnection(port: server.tlsPort, receiveBuffer: 4096)
        defer { close(fd) }
        let context = try TLSClientOptions(caCertificateFile: certificates.caCertificate).makeContext()
        let tls = try startTLS(on: fd, to: .tcp(host: "127.0.0.1", port: server.tlsPort), context: context, serverName: nil)
        let request = EscapedProfiles.mget + Array("GET esc7\nPING\n".utf8)
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { tls.send($0.baseAddress!, count: $0.count) }
            guard n > 0 else { throw TestFailure("sending the requests failed: \(String(cString: strerror(errno)))") }
            sent += n
        }
        usleep(300_000)
        let held = Int(try Self.stat(server, "client_memory_bytes") ?? "") ?? -1
        #expect(held > 0 && held <= (1 << 20) + (96 << 10) + (40 << 10), "the slow reader holds \(held) bytes")
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while Array(received.suffix(5)) != Array("PONG\n".utf8) {
            let n = chunk.withUnsafeMutableBytes { tls.receive(into: $0.baseAddress!, count: $0.count) }
            guard n > 0 else { throw TestFailure("the connection ended after \(received.count) bytes") }
            received += chunk[0..<n]
        }
        let lines = received.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        let expected = EscapedProfiles.ids.map(EscapedProfiles.valueLine) + ["END", EscapedProfiles.valueLine("esc7"), "PONG"]
        #expect(lines.count == expected.count && lines == expected, "\(firstDifference(lines, expected) ?? "")")
    }

    @Test func clientCertificatesAreCheckedAtTheHandshake() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates, ["--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "yes"])
        for (certificate, key) in [(nil, nil), (certificates.expiredCertificate, certificates.clientKey),
                                   (certificates.strangerCertificate, certificates.strangerKey)] {
            // TLS 1.3 finishes the client's side of the handshake before the server has checked
            // its certificate: the refusal arrives as the first read, as an alert or, when the
            // client's request reached the closed socket first, as a reset.
            do {
                let refused = try Self.tlsConnection(server, certificates, certificate: certificate, key: key)
                refused.send("SET", ["refused", "x", "y"])
                try? refused.flush()
                _ = try refused.readLine()
                Issue.record("a client with \(certificate ?? "no certificate") was served")
            } catch {
                let text = "\(error)"
                #expect(text.contains("certificate") || text.contains("closed") || text.contains("reset"), "\(text)")
            }
        }
        let accepted = try Self.tlsConnection(server, certificates, certificate: certificates.clientCertificate,
                                              key: certificates.clientKey)
        #expect(try accepted.get(Array("refused".utf8)) == nil)
        #expect(try Self.stat(server, "tls_handshake_failures") == "3")
        #expect(try Self.stat(server, "tls_handshakes") == "1")
        let withCertificate = try runCommand(["python3", Self.redisPy, "--port", "\(server.respTLSPort)",
                                              "--tls-ca", certificates.caCertificate, "--tls-cert", certificates.clientCertificate,
                                              "--tls-key", certificates.clientKey], timeoutSeconds: 120)
        #expect(withCertificate.status == 0, "\(withCertificate)")
        let without = try runCommand(["redis-cli", "--tls", "--cacert", certificates.caCertificate, "-h", "127.0.0.1",
                                      "-p", "\(server.respTLSPort)", "PING"])
        #expect(without.stdout != "PONG\n", "\(without)")
        // optional: no certificate is served, and a certificate that is sent must still chain to the CA.
        let optional = try Self.start(certificates, ["--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "optional"])
        #expect(try Self.tlsConnection(optional, certificates).roundTrip("PING\n") == "PONG")
        #expect(throws: (any Error).self) {
            let stranger = try Self.tlsConnection(optional, certificates, certificate: certificates.strangerCertificate,
                                                  key: certificates.strangerKey)
            _ = try stranger.roundTrip("PING\n")
        }
    }

    /// Each client tool checks that the server's certificate names the address or host it
    /// connected to: a certificate from the trusted CA for 127.0.0.2 alone, reached at
    /// 127.0.0.1, and one for `other.example` alone, reached as `localhost`, are refused by
    /// profilectl, profilebench and ProfileClient, each saying the name does not match.
    @Test func aCertificateForAnotherNameIsRefusedByEveryClientTool() throws {
        let certificates = try TestCertificates.shared()
        for (certificate, key, host, mismatch) in [
            (certificates.elsewhereAddressCertificate, certificates.elsewhereAddressKey, "127.0.0.1", "IP address mismatch"),
            (certificates.elsewhereNameCertificate, certificates.elsewhereNameKey, "localhost", "hostname mismatch"),
        ] {
            let server = try TestServer(["--tls-port", "0", "--tls-cert-file", certificate, "--tls-key-file", key])
            let port = "\(server.tlsPort)"
            let ctl = try Self.profilectl(["ping", "--tls", "--cacert", certificates.caCertificate, "--host", host, "--port", port])
            #expect(ctl.status != 0 && ctl.stderr.contains(mismatch), "profilectl: \(ctl)")
            let bench = try runCommand([executable("profilebench"), "--tls", "--cacert", certificates.caCertificate, "--host", host,
                                        "--port", port, "--conns", "1", "--requests", "1"], timeoutSeconds: 30)
            #expect(bench.status != 0 && (bench.stderr + bench.stdout).contains(mismatch), "profilebench: \(bench)")
            do {
                let client = try ProfileConnection(.tcp(host: host, port: server.tlsPort), timeoutSeconds: 10,
                                                   tls: TLSClientOptions(caCertificateFile: certificates.caCertificate))
                _ = try client.roundTrip("PING\n")
                Issue.record("ProfileClient accepted a certificate for another name at \(host)")
            } catch {
                #expect("\(error)".contains(mismatch), "ProfileClient: \(error)")
            }
        }
    }

    /// profilectl says what a client that got the port or the certificate wrong most likely
    /// met: TLS to a plain port, plain text to a TLS port, and no certificate where the server
    /// requires one.
    @Test func aWrongPortOrAMissingCertificateIsSaidPlainly() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates, ["--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "yes"])
        let toPlain = try Self.profilectl(["ping", "--tls", "--cacert", certificates.caCertificate, "--port", "\(server.port)"])
        #expect(toPlain.status == 2 && toPlain.stderr.contains("the server does not speak TLS on this port: connect without --tls"),
                "\(toPlain)")
        let toTLS = try Self.profilectl(["ping", "--port", "\(server.tlsPort)"])
        #expect(toTLS.status == 2 && toTLS.stderr.contains("(if this port speaks TLS, connect with --tls)"), "\(toTLS)")
        let withoutCertificate = try Self.profilectl(["ping", "--tls", "--cacert", certificates.caCertificate,
                                                      "--port", "\(server.tlsPort)"])
        #expect(withoutCertificate.status == 2
                && withoutCertificate.stderr.contains("the server may require a client certificate: --cert and --key"),
                "\(withoutCertificate)")
        let withCertificate = try Self.profilectl(["ping", "--tls", "--cacert", certificates.caCertificate, "--cert",
                                                   certificates.clientCertificate, "--key", certificates.clientKey,
                                                   "--port", "\(server.tlsPort)"])
        #expect(withCertificate.stdout == "PONG\n", "\(withCertificate)")
    }

    /// A certificate's common name maps to a role in the tokens file; a certificate that is
    /// not listed gets no role, and AUTH still works over TLS.
    @Test func aCertificateNameMapsToARoleAndTokensStillApply() throws {
        let certificates = try TestCertificates.shared()
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        writeText(directory + "/tokens", "read cert-cn chat-1\nadmin admin-token\n")
        let server = try Self.start(certificates, ["--tls-ca-cert-file", certificates.caCertificate, "--tokens", directory + "/tokens"])
        let chat = try Self.tlsConnection(server, certificates, certificate: certificates.clientCertificate, key: certificates.clientKey)
        #expect(try chat.roundTrip("GET someone\n") == "NOTFOUND someone")
        #expect(try chat.roundTrip("SET someone a b\n").hasPrefix("ERROR DENIED"))
        let ops = try Self.tlsConnection(server, certificates, certificate: certificates.opsCertificate, key: certificates.opsKey)
        #expect(try ops.roundTrip("GET someone\n").hasPrefix("ERROR NOAUTH"))
        #expect(try ops.roundTrip("AUTH admin-token\n") == "OK")
        #expect(try ops.roundTrip("SET someone a b\n") == "STORED")
        let cli = try runCommand(["redis-cli", "--tls", "--cacert", certificates.caCertificate, "--cert", certificates.clientCertificate,
                                  "--key", certificates.clientKey, "-h", "127.0.0.1", "-p", "\(server.respTLSPort)", "HGET", "someone", "name"])
        #expect(cli.stdout == "a\n", "\(cli)")
    }

    @Test func versionsOutsideTheSettingAreRefused() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates)
        let old = try runCommand(["openssl", "s_client", "-tls1_1", "-connect", "127.0.0.1:\(server.tlsPort)"], timeoutSeconds: 20)
        #expect(old.status != 0 && !old.stdout.contains("BEGIN CERTIFICATE"), "\(old)")
        let tls12 = try runCommand(["openssl", "s_client", "-tls1_2", "-CAfile", certificates.caCertificate,
                                    "-connect", "127.0.0.1:\(server.tlsPort)"], timeoutSeconds: 20)
        #expect(tls12.status == 0 && tls12.stdout.contains("Protocol  : TLSv1.2"), "\(tls12)")
        let only13 = try Self.start(certificates, ["--tls-protocols", "TLSv1.3"])
        let refused12 = try runCommand(["openssl", "s_client", "-tls1_2", "-connect", "127.0.0.1:\(only13.tlsPort)"], timeoutSeconds: 20)
        #expect(refused12.status != 0 && !refused12.stdout.contains("BEGIN CERTIFICATE"), "\(refused12)")
    }

    /// Plain requests sent to a TLS port are not a handshake: closed, nothing served, nothing written.
    @Test func plainBytesToATLSPortAreNotServed() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates)
        let plain = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.tlsPort), timeoutSeconds: 10)
        plain.sendRaw(Array("SET plain x y\nGET plain\n".utf8))
        try? plain.flush()
        #expect(throws: ClientError.self) { _ = try plain.readLine() }
        let resp = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.respTLSPort), timeoutSeconds: 10)
        resp.sendRaw(Array("*4\r\n$4\r\nHSET\r\n$5\r\nplain\r\n$4\r\nname\r\n$1\r\nx\r\n".utf8))
        try? resp.flush()
        #expect(throws: ClientError.self) { _ = try resp.readLine() }
        #expect(try Self.tlsConnection(server, certificates).get(Array("plain".utf8)) == nil)
        #expect(try Self.stat(server, "tls_handshake_failures") == "2")
    }

    /// Why a handshake failed is in the server's log at its default level, with the client's
    /// address, at most once a second: a line says how many failures it left out since the
    /// one before, so that the lines and their counts add up to every failure.
    @Test func aFailedHandshakeIsLoggedAtMostOnceASecond() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates, ["--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "yes"])
        func failures() -> [String] {
            readText(server.logPath).split(separator: "\n").map(String.init).filter { $0.contains("msg=\"TLS handshake failed\"") }
        }
        func waitFor(_ handshakes: Int) {
            for _ in 0..<500 where (try? Self.stat(server, "tls_handshake_failures")) != "\(handshakes)" { usleep(10_000) }
        }
        let withoutCertificate = try Self.profilectl(["ping", "--tls", "--cacert", certificates.caCertificate, "--port", "\(server.tlsPort)"])
        #expect(withoutCertificate.status == 2)
        waitFor(1)
        let first = failures()
        #expect(first.count == 1 && first[0].contains("level=warn") && first[0].contains("peer=127.0.0.1:")
                && first[0].contains("certificate") && !first[0].contains("left_out"), "\(first)")
        // Plain text on the TLS port, ten times at once, then once more a second later.
        for _ in 0..<10 {
            let plain = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.tlsPort), timeoutSeconds: 10)
            plain.sendRaw(Array("PING\n".utf8))
            try? plain.flush()
            #expect(throws: ClientError.self) { _ = try plain.readLine() }
        }
        waitFor(11)
        usleep(1_100_000)
        let last = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.tlsPort), timeoutSeconds: 10)
        last.sendRaw(Array("PING\n".utf8))
        try? last.flush()
        #expect(throws: ClientError.self) { _ = try last.readLine() }
        waitFor(12)
        var lines = failures()
        for _ in 0..<100 where lines.count < 2 || !(lines.last ?? "").contains("version") {
            usleep(10_000)
            lines = failures()
        }
        let leftOut = lines.map { line in
            line.split(separator: " ").first { $0.hasPrefix("left_out=") }.flatMap { Int($0.dropFirst("left_out=".count)) } ?? 0
        }
        // Eleven failures within about a second: one or two lines for them, and one for the last.
        #expect((2...4).contains(lines.count) && lines.count + leftOut.reduce(0, +) == 12, "\(lines)")
        #expect(lines.dropFirst().allSatisfy { $0.contains("peer=127.0.0.1:") && $0.contains("reason=") }, "\(lines)")
    }

    /// A client that connects and sends nothing, or half a ClientHello, is closed at the
    /// handshake timeout; the server goes on serving meanwhile.
    @Test func aStalledHandshakeIsClosedAtTheTimeout() throws {
        let certificates = try TestCertificates.shared()
        let server = try Self.start(certificates, ["--tls-handshake-timeout", "1"])
        let silent = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.tlsPort), timeoutSeconds: 10)
        let halfHello = try ProfileConnection(.tcp(host: "127.0.0.1", port: server.respTLSPort), timeoutSeconds: 10)
        // A TLS record header announcing 512 bytes of handshake, then only 4 of them.
        halfHello.sendRaw([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc])
        try halfHello.flush()
        let start = monotonicSeconds()
        #expect(try Self.tlsConnection(server, certificates).roundTrip("PING\n") == "PONG")
        #expect(try silent.isClosedByServer())
        #expect(try halfHello.isClosedByServer())
        let waited = monotonicSeconds() - start
        #expect(waited > 0.5 && waited < 8, "closed after \(waited) s")
        #expect(try Self.stat(server, "tls_handshake_timeouts") == "2")
        // Only the connection asking is left, once the server has seen the others close.
        try waitFor { (try? Self.stat(server, "curr_connections")) == "1" }
    }

    /// SIGHUP reads the certificate files again: new connections get the new certificate,
    /// open ones go on; a reload that fails keeps the certificate in force and says so.
    @Test func sighupRotatesTheCertificateAndAFailedReloadKeepsIt() throws {
        let certificates = try TestCertificates.shared()
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let certificate = directory + "/tls.crt", key = directory + "/tls.key"
        writeText(certificate, readText(certificates.serverCertificate))
        writeText(key, readText(certificates.serverKey))
        let server = try TestServer(["--tls-port", "0", "--tls-cert-file", certificate, "--tls-key-file", key,
                                     "--metrics", "127.0.0.1:0"], directory: directory)
        let before = try Self.tlsConnection(server, certificates)
        #expect(before.tlsPeerCommonName == "localhost")

        writeText(certificate, readText(certificates.rotatedCertificate))
        writeText(key, readText(certificates.rotatedKey))
        kill(server.pid, SIGHUP)
        try waitFor { server.log.contains("TLS certificates reloaded") }
        #expect(try Self.tlsConnection(server, certificates).tlsPeerCommonName == "rotated")
        #expect(try before.roundTrip("PING\n") == "PONG")
        #expect(before.tlsPeerCommonName == "localhost")

        // A key that does not match the certificate: the rotated pair stays in force.
        writeText(key, readText(certificates.serverKey))
        kill(server.pid, SIGHUP)
        try waitFor { server.log.contains("TLS certificates not reloaded") }
        #expect(server.log.contains("does not match the certificate"))
        #expect(try Self.tlsConnection(server, certificates).tlsPeerCommonName == "rotated")
        let metrics = try httpGet(port: try metricsPort(server.log), path: "/metrics").body
        #expect(metrics.contains("\nprofiled_tls_reload_failed 1\n"), "\(metrics)")
        #expect(metrics.contains("\nprofiled_tls_reload_failures_total 1\n"))
        // An unreadable file is reported the same way.
        unlink(certificate)
        kill(server.pid, SIGHUP)
        try waitFor { server.log.contains("cannot read the certificate file") }
        #expect(try Self.tlsConnection(server, certificates).tlsPeerCommonName == "rotated")
    }

    /// `--metrics-tls`: /metrics and /healthz over HTTPS, with the listeners' certificate and
    /// client checks; plain HTTP gets nothing.
    @Test func metricsOverTLS() throws {
        let certificates = try TestCertificates.shared()
        let server = try TestServer(["--tls-port", "0", "--tls-cert-file", certificates.serverCertificate,
                                     "--tls-key-file", certificates.serverKey, "--tls-ca-cert-file", certificates.caCertificate,
                                     "--metrics", "127.0.0.1:0", "--metrics-tls"])
        let port = try metricsPort(server.log)
        let requests = try makeTemporaryDirectory()
        defer { removeDirectory(requests) }
        writeText(requests + "/get", "GET /metrics HTTP/1.0\r\n\r\n")
        let https = ["openssl", "s_client", "-quiet", "-verify_return_error", "-CAfile", certificates.caCertificate,
                     "-connect", "127.0.0.1:\(port)"]
        let scrape = try runCommand(https + ["-cert", certificates.clientCertificate, "-key", certificates.clientKey],
                                    stdinPath: requests + "/get", timeoutSeconds: 20)
        #expect(scrape.stdout.hasPrefix("HTTP/1.1 200 OK\r\n") && scrape.stdout.contains("\nprofiled_tls_handshakes_total "),
                "\(scrape)")
        let withoutCertificate = try runCommand(https, stdinPath: requests + "/get", timeoutSeconds: 20)
        #expect(!withoutCertificate.stdout.contains("HTTP/1.1"), "\(withoutCertificate)")
        #expect(throws: (any Error).self) { _ = try httpGet(port: port, path: "/healthz", timeoutSeconds: 5) }
        #expect(server.log.contains("scheme=https"))
    }

    /// A host beyond loopback without tokens is served when every listener on it is TLS
    /// that requires a client certificate; a plain listener beside it is still refused.
    @Test func certificatesAloneMayGuardANonLoopbackHost() throws {
        let certificates = try TestCertificates.shared()
        let tls = ["--tls-port", "0", "--tls-cert-file", certificates.serverCertificate, "--tls-key-file", certificates.serverKey,
                   "--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "yes", "--host", "0.0.0.0"]
        let server = try TestServer(tls + ["--port", "off", "--resp-port", "off"])
        let client = try Self.tlsConnection(server, certificates, certificate: certificates.clientCertificate, key: certificates.clientKey)
        #expect(try client.roundTrip("PING\n") == "PONG")
        let optional = ["--tls-port", "0", "--tls-cert-file", certificates.serverCertificate, "--tls-key-file", certificates.serverKey,
                        "--tls-ca-cert-file", certificates.caCertificate, "--tls-auth-clients", "optional", "--host", "0.0.0.0",
                        "--port", "off"]
        for refused in [tls, tls + ["--resp-port", "0", "--port", "off"], optional] {
            // Bounded: a server that wrongly starts is killed, and the test fails.
            let run = try runCommand([executable("profiled")] + refused, timeoutSeconds: 10)
            #expect(run.status == 64 && run.stderr.contains("refusing to listen on 0.0.0.0 without --tokens"), "\(refused): \(run)")
        }
    }

    /// The TLS keys of a config file, as the flags: the listener, the files, the versions and
    /// metrics over HTTPS; a bad value is named with its file and line.
    @Test func theConfigFileTakesTheTLSKeys() throws {
        let certificates = try TestCertificates.shared()
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let config = directory + "/profiled.conf"
        writeText(config, """
            tls-port = 0
            tls-cert-file = \(certificates.serverCertificate)
            tls-key-file = \(certificates.serverKey)
            tls-ca-cert-file = \(certificates.caCertificate)
            tls-auth-clients = optional
            tls-protocols = TLSv1.3
            tls-handshake-timeout = 5
            metrics = 127.0.0.1:0
            metrics-tls = true

            """)
        let server = try TestServer(["--config", config])
        #expect(try Self.tlsConnection(server, certificates).tlsVersion == "TLSv1.3")
        let tls12 = try runCommand(["openssl", "s_client", "-tls1_2", "-connect", "127.0.0.1:\(server.tlsPort)"], timeoutSeconds: 20)
        #expect(tls12.status != 0 && !tls12.stdout.contains("BEGIN CERTIFICATE"), "\(tls12)")
        #expect(server.log.contains("scheme=https"))
        writeText(config, "tls-port = 0\ntls-auth-clients = maybe\n")
        let (status, output) = try runToCompletion(executable("profiled"), ["--config", config])
        #expect(status == 64 && output.contains("profiled.conf:2: tls-auth-clients takes yes, no or optional, not 'maybe'"), "\(output)")
    }

    @Test func unusableTLSFilesStopStartupWithTheReason() throws {
        let certificates = try TestCertificates.shared()
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        for (files, reason) in [([directory + "/missing.crt", certificates.serverKey], "cannot read the certificate file"),
                                ([certificates.serverCertificate, certificates.clientKey], "does not match the certificate"),
                                ([certificates.serverCertificate, directory + "/missing.key"], "cannot read the key file")] {
            let (status, output) = try runToCompletion(executable("profiled"), [
                "--port", "0", "--tls-port", "0", "--tls-cert-file", files[0], "--tls-key-file", files[1],
                "--db", directory + "/p.sqlite3"])
            #expect(status == 1 && output.contains(reason), "\(files): \(output)")
        }
        let (status, output) = try runToCompletion(executable("profiled"), [
            "--port", "0", "--tls-port", "0", "--tls-cert-file", certificates.serverCertificate,
            "--tls-key-file", certificates.serverKey, "--tls-ca-cert-file", directory + "/missing-ca.crt",
            "--db", directory + "/p.sqlite3"])
        #expect(status == 1 && output.contains("cannot read the CA certificate file"), "\(output)")
    }
}
