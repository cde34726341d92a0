import Glibc
import ProfileClient
import Testing

/// A scripted peer on a Unix socket: reads whatever the client sends and answers with fixed
/// bytes, split into small chunks so the client must reassemble lines.
final class ScriptedPeer: @unchecked Sendable {
    let path: String
    private let listener: Int32
    private var thread = pthread_t()

    init(reply: [UInt8], chunk: Int) throws {
        var template = Array("/tmp/profiled-client-XXXXXX".utf8CString)
        guard let dir = mkdtemp(&template) else { throw ClientError.io("mkdtemp") }
        path = String(cString: dir) + "/peer.sock"
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes + [0]) }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        listen(listener, 1)
        final class Job { let fd: Int32; let reply: [UInt8]; let chunk: Int
            init(_ fd: Int32, _ reply: [UInt8], _ chunk: Int) { self.fd = fd; self.reply = reply; self.chunk = chunk } }
        let job = Unmanaged.passRetained(Job(listener, reply, chunk)).toOpaque()
        pthread_create(&thread, nil, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            let fd = accept(job.fd, nil, nil)
            var scratch = [UInt8](repeating: 0, count: 4096)
            _ = recv(fd, &scratch, scratch.count, 0)
            var offset = 0
            while offset < job.reply.count {
                let n = min(job.chunk, job.reply.count - offset)
                _ = job.reply.withUnsafeBytes { send(fd, $0.baseAddress! + offset, n, Int32(MSG_NOSIGNAL)) }
                offset += n
                usleep(200)
            }
            close(fd)
            return nil
        }, job)
    }

    deinit {
        pthread_join(thread, nil)
        close(listener)
        unlink(path)
    }
}

@Suite struct ClientTests {
    @Test(arguments: [1, 2, 3, 7, 64])
    func parsesQuotedValuesAtAnyChunkSize(chunk: Int) throws {
        let reply = Array("VALUE \"a b\" \"x\\\"y\\\\z\\n\\x01\" \"\"\nVALUE 7 小明 u\nNOTFOUND q\nEND\n".utf8)
        let peer = try ScriptedPeer(reply: reply, chunk: chunk)
        let c = try ProfileConnection(.unix(path: peer.path))
        let got = try c.mget([Array("a b".utf8), Array("7".utf8), Array("q".utf8)])
        #expect(got == [
            Profile(userId: Array("a b".utf8), name: Array("x\"y\\z\n".utf8) + [0x01], portraitUri: []),
            Profile(userId: "7", name: "小明", portraitUri: "u"),
            nil,
        ])
    }

    @Test func errorRepliesBecomeServerErrorsWithTheirCode() throws {
        let peer = try ScriptedPeer(reply: Array("ERROR TOOLARGE userId exceeds 128 bytes\n".utf8), chunk: 5)
        let c = try ProfileConnection(.unix(path: peer.path))
        #expect(throws: ClientError.server(code: "TOOLARGE", message: "userId exceeds 128 bytes")) {
            _ = try c.get(Array("x".utf8))
        }
    }

    @Test func garbageIsReportedNotGuessed() throws {
        let peer = try ScriptedPeer(reply: Array("HELLO there\n".utf8), chunk: 3)
        let c = try ProfileConnection(.unix(path: peer.path))
        #expect(throws: ClientError.unexpectedReply("HELLO there")) { _ = try c.get(Array("x".utf8)) }
    }

    @Test func aClosedConnectionIsAnIOError() throws {
        let peer = try ScriptedPeer(reply: Array("VALUE a".utf8), chunk: 4)
        let c = try ProfileConnection(.unix(path: peer.path))
        #expect {
            _ = try c.get(Array("a".utf8))
        } throws: { error in
            if case ClientError.io = error { return true }
            return false
        }
    }

    @Test func aWriteToAServerThatClosedNamesItsLastReply() throws {
        let peer = try ScriptedPeer(reply: Array("STORED 1\nERROR TOOLONG request line over the limit\n".utf8), chunk: 100)
        let c = try ProfileConnection(.unix(path: peer.path))
        // Far more than the socket buffers hold, so the write is still going when the peer closes.
        c.sendRaw([UInt8](repeating: 0x61, count: 8 << 20))
        #expect {
            try c.flush()
        } throws: { error in
            guard case ClientError.io(let reason) = error else { return false }
            return reason.hasSuffix("; the server's last reply: ERROR TOOLONG request line over the limit")
        }
        // What the server sent is still there to read, in order.
        #expect(try c.readStoredCount() == 1)
        #expect(throws: ClientError.server(code: "TOOLONG", message: "request line over the limit")) {
            _ = try c.readReply()
        }
    }

    @Test func requestsQuoteWhatNeedsQuoting() throws {
        let peer = try ScriptedPeer(reply: Array("STORED\n".utf8), chunk: 100)
        let c = try ProfileConnection(.unix(path: peer.path))
        c.send([Array("SET".utf8), Array("a b".utf8), [], Array("tab\there".utf8)])
        #expect(c.queuedBytes == "SET \"a b\" \"\" \"tab\\there\"\n".utf8.count)
        try c.flush()
        #expect(try c.readReply() == [Array("STORED".utf8)])
    }

    @Test func refusedConnectionNamesTheEndpoint() throws {
        #expect {
            _ = try ProfileConnection(.unix(path: "/nonexistent/profiled.sock"))
        } throws: { error in
            "\(error)".contains("/nonexistent/profiled.sock")
        }
    }
}
