import Glibc

/// Throw-away certificates made with the `openssl` command, in a directory of their own:
/// a CA; a server certificate for 127.0.0.1 and localhost and a second one (for rotation);
/// server certificates for another address and another name;
/// client certificates with the common names `chat-1` and `ops-1`; an expired client
/// certificate; and a CA of another name with a client certificate of its own. Removed when
/// released.
///
/// Threading: one test uses it; any thread.
public final class TestCertificates: @unchecked Sendable {
    public let directory: String

    /// One set for the whole test run, made on first use, never changed and removed when the
    /// process exits: for tests that only read the files.
    public static func shared() throws -> TestCertificates { try sharedSet.get() }
    // A global's lazy initialization runs once (swift_once), which ThreadSanitizer sees,
    // unlike the futex handoff of Synchronization's Mutex.
    private static let sharedSet = Result<TestCertificates, any Error> {
        let made = try TestCertificates(removedOnRelease: false)
        sharedDirectory = made.directory
        atexit { TestCertificates.sharedDirectory.map(removeDirectory) }
        return made
    }
    /// Written once, by the shared set's initializer; read at exit.
    nonisolated(unsafe) private static var sharedDirectory: String?
    private let removedOnRelease: Bool

    public var caCertificate: String { directory + "/ca.crt" }
    public var serverCertificate: String { directory + "/server.crt" }
    public var serverKey: String { directory + "/server.key" }
    /// Another certificate for the same names from the same CA, with the common name `rotated`.
    public var rotatedCertificate: String { directory + "/rotated.crt" }
    public var rotatedKey: String { directory + "/rotated.key" }
    /// Signed by the CA, common name `chat-1`.
    public var clientCertificate: String { directory + "/client.crt" }
    public var clientKey: String { directory + "/client.key" }
    /// Signed by the CA, common name `ops-1`.
    public var opsCertificate: String { directory + "/ops.crt" }
    public var opsKey: String { directory + "/ops.key" }
    /// Signed by the CA, common name `chat-1`, and expired a day before it was made.
    public var expiredCertificate: String { directory + "/expired.crt" }
    /// Server certificates from the CA for names profiled's tests never listen on: the
    /// address 127.0.0.2 alone, and the name `other.example` alone.
    public var elsewhereAddressCertificate: String { directory + "/elsewhere-ip.crt" }
    public var elsewhereAddressKey: String { directory + "/elsewhere-ip.key" }
    public var elsewhereNameCertificate: String { directory + "/elsewhere-dns.crt" }
    public var elsewhereNameKey: String { directory + "/elsewhere-dns.key" }
    /// The other CA's certificate, and a client certificate (`chat-1`) it signed.
    public var otherCACertificate: String { directory + "/other-ca.crt" }
    public var strangerCertificate: String { directory + "/stranger.crt" }
    public var strangerKey: String { directory + "/stranger.key" }

    public convenience init() throws { try self.init(removedOnRelease: true) }

    private init(removedOnRelease: Bool) throws {
        self.removedOnRelease = removedOnRelease
        directory = try makeTemporaryDirectory()
        do {
            try make()
        } catch {
            removeDirectory(directory)
            throw error
        }
    }

    deinit { if removedOnRelease { removeDirectory(directory) } }

    private func make() throws {
        try authority("ca", name: "profiled test CA")
        try authority("other-ca", name: "another CA")
        writeText(directory + "/server.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        try leaf("server", name: "localhost", signer: "ca", extensions: "server.ext")
        try leaf("rotated", name: "rotated", signer: "ca", extensions: "server.ext")
        writeText(directory + "/elsewhere-ip.ext", "subjectAltName=IP:127.0.0.2\n")
        try leaf("elsewhere-ip", name: "127.0.0.2", signer: "ca", extensions: "elsewhere-ip.ext")
        writeText(directory + "/elsewhere-dns.ext", "subjectAltName=DNS:other.example\n")
        try leaf("elsewhere-dns", name: "other.example", signer: "ca", extensions: "elsewhere-dns.ext")
        try leaf("client", name: "chat-1", signer: "ca")
        try leaf("ops", name: "ops-1", signer: "ca")
        try leaf("stranger", name: "chat-1", signer: "other-ca")
        // Signed with the client's key, valid until a day before it was made: expired.
        try openssl(["x509", "-req", "-in", path("client.csr"), "-CA", path("ca.crt"), "-CAkey", path("ca.key"),
                     "-set_serial", "99", "-days", "-1", "-out", path("expired.crt")])
    }

    private func authority(_ file: String, name: String) throws {
        try openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", path("\(file).key"),
                     "-out", path("\(file).crt"), "-days", "30", "-subj", "/CN=\(name)"])
    }

    private func leaf(_ file: String, name: String, signer: String, extensions: String? = nil) throws {
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", path("\(file).key"), "-out", path("\(file).csr"),
                     "-subj", "/CN=\(name)"])
        try openssl(["x509", "-req", "-in", path("\(file).csr"), "-CA", path("\(signer).crt"), "-CAkey", path("\(signer).key"),
                     "-set_serial", "\(UInt32.random(in: 1...UInt32.max))", "-days", "30", "-out", path("\(file).crt")]
                    + (extensions.map { ["-extfile", path($0)] } ?? []))
    }

    private func path(_ file: String) -> String { directory + "/" + file }

    private func openssl(_ arguments: [String]) throws {
        let logPath = directory + "/openssl.log"
        let pid = try spawn("/usr/bin/openssl", args: arguments, stderrPath: logPath)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else {
            throw TestFailure("openssl \(arguments.joined(separator: " ")) failed: \(readText(logPath))")
        }
    }
}
