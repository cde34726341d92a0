import Glibc
import ProfileClient
import ProfileTLS
import ProfileTestSupport

/// A bare RESP client for the tests: sends bytes as given and reads whole replies back as
/// their raw text, so a test states the exact bytes it expects.
///
/// Threading: one thread at a time.
final class RESPTestClient {
    private let fd: Int32
    /// The TLS session every byte passes through; nil in clear.
    private let tls: TLSSession?
    private var buffer: [UInt8] = []

    convenience init(port: UInt16) throws {
        self.init(fd: try rawLoopbackConnection(port: port))
    }

    /// Over TLS to a TLS listener, checking its certificate against the tests' CA.
    convenience init(tlsPort port: UInt16) throws {
        let fd = try rawLoopbackConnection(port: port)
        do {
            let context = try TLSClientOptions(caCertificateFile: try TestCertificates.shared().caCertificate).makeContext()
            self.init(fd: fd, tls: try startTLS(on: fd, to: .tcp(host: "127.0.0.1", port: port), context: context, serverName: nil))
        } catch {
            close(fd)
            throw error
        }
    }

    /// Takes over a connected socket, and its TLS session when there is one.
    init(fd: Int32, tls: TLSSession? = nil) {
        self.fd = fd
        self.tls = tls
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        tls?.shutdown()
        close(fd)
    }

    func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { raw in
                guard let tls else { return Glibc.send(fd, raw.baseAddress!, raw.count, Int32(MSG_NOSIGNAL)) }
                return tls.send(raw.baseAddress!, count: raw.count)
            }
            guard n > 0 else { return }
            sent += n
        }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// A request as a multibulk of `arguments`.
    static func multibulk(_ arguments: [String]) -> [UInt8] {
        var bytes = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments {
            let raw = Array(argument.utf8)
            bytes += Array("$\(raw.count)\r\n".utf8) + raw + Array("\r\n".utf8)
        }
        return bytes
    }

    /// Sends one command as a multibulk and returns its reply's raw text.
    func call(_ arguments: String...) throws -> String {
        try call(arguments)
    }

    func call(_ arguments: [String]) throws -> String {
        send(Self.multibulk(arguments))
        return try reply()
    }

    /// The next whole reply, as its raw text.
    func reply() throws -> String {
        while true {
            if let end = Self.replyEnd(buffer, 0) {
                let text = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end)
                return text
            }
            guard try receive() else { throw TestFailure("the connection closed inside a reply: \(String(decoding: buffer, as: UTF8.self))") }
        }
    }

    /// The whole replies (pushes among them) that have arrived, without waiting for more.
    func arrivedReplies() throws -> [String] {
        var readable = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while poll(&readable, 1, 0) > 0 {
            guard try receive() else { break }
        }
        var replies: [String] = []
        while let end = Self.replyEnd(buffer, 0) {
            replies.append(String(decoding: buffer[..<end], as: UTF8.self))
            buffer.removeFirst(end)
        }
        return replies
    }

    /// Whether the server closed the connection (after any replies still to read).
    func isClosedByServer() throws -> Bool {
        buffer.isEmpty ? !(try receive()) && buffer.isEmpty : false
    }

    private func receive() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { raw in
            guard let tls else { return recv(fd, raw.baseAddress!, raw.count, 0) }
            return tls.receive(into: raw.baseAddress!, count: raw.count)
        }
        if n < 0 { throw TestFailure("no reply: \(String(cString: strerror(errno)))") }
        buffer += chunk[..<n]
        return n > 0
    }

    /// Where the reply starting at `start` ends, or nil when it has not fully arrived.
    private static func replyEnd(_ bytes: [UInt8], _ start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        guard let cr = bytes[start...].firstIndex(of: 13), cr + 1 < bytes.count else { return nil }
        let lineEnd = cr + 2
        let number = Int(String(decoding: bytes[(start + 1)..<cr], as: UTF8.self))
        switch bytes[start] {
        case UInt8(ascii: "$"):
            guard let length = number else { return nil }
            if length < 0 { return lineEnd }
            return lineEnd + length + 2 <= bytes.count ? lineEnd + length + 2 : nil
        case UInt8(ascii: "*"), UInt8(ascii: "%"), UInt8(ascii: ">"), UInt8(ascii: "~"):
            guard let count = number else { return nil }
            var end = lineEnd
            let elements = bytes[start] == UInt8(ascii: "%") ? 2 * count : count
            for _ in 0..<max(0, elements) {
                guard let next = replyEnd(bytes, end) else { return nil }
                end = next
            }
            return end
        default:
            return lineEnd
        }
    }
}

extension TestServer {
    /// A RESP connection to a server started with `--resp-port`: over TLS to its RESP TLS
    /// listener when the tests run over TLS (`PROFILED_TEST_TLS`).
    func connectRESP() throws -> RESPTestClient {
        testTransportIsTLS ? try RESPTestClient(tlsPort: respTLSPort) : try RESPTestClient(port: respPort)
    }

    /// The port RESP clients of the tests use: the RESP TLS listener's when the tests run
    /// over TLS, else the plain one's.
    var respFrontPort: UInt16 { testTransportIsTLS ? respTLSPort : respPort }
}
