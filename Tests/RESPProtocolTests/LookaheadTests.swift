import RESPProtocol
import Testing

/// Reading a pass's requests ahead (`decodeAhead`): what the server prefetches the cache
/// entries of pipelined key reads from, and what `decode` then hands out without reading it
/// again.
@Suite struct LookaheadTests {
    private static let read = "*2\r\n$7\r\nHGETALL\r\n$2\r\nk1\r\n"

    /// The requests read ahead, each as its arguments.
    private func ahead(_ decoder: RESPDecoder, _ bytes: UnsafeRawBufferPointer, limit: Int = 32,
                       authenticated: Bool = true) -> [[String]] {
        let count = decoder.decodeAhead(bytes, limit: limit, authenticated: authenticated)
        return (0..<count).map { decoder.aheadArguments($0).map { String(decoding: $0, as: UTF8.self) } }
    }

    private func ahead(_ text: String, limit: Int = 32, authenticated: Bool = true) -> [[String]] {
        Array(text.utf8).withUnsafeBytes { ahead(RESPDecoder(), $0, limit: limit, authenticated: authenticated) }
    }

    /// Every request `decode` gives for `bytes` from its start, as arguments, bytes taken and
    /// which request read ahead it was (`aheadIndex`).
    private func decodeAll(_ decoder: RESPDecoder, _ bytes: UnsafeRawBufferPointer,
                           authenticated: Bool = true) -> [([String], Int, Int)] {
        var decoded: [([String], Int, Int)] = []
        var used = 0
        var state = RESPDecodeState()
        while used < bytes.count,
              case .request(let consumed) = decoder.decode(UnsafeRawBufferPointer(rebasing: bytes[used...]), state: &state,
                                                           authenticated: authenticated) {
            decoded.append((decoder.arguments.map { String(decoding: $0, as: UTF8.self) }, consumed, decoder.aheadIndex))
            used += consumed
        }
        return decoded
    }

    @Test func wholeRequestsInTheirPlainestFormAreReadAheadInOrder() {
        let pipeline = Self.read
            + "*4\r\n$4\r\nHSET\r\n$2\r\nw1\r\n$4\r\nname\r\n$1\r\nx\r\n"
            + "*1\r\n$4\r\nPING\r\n"
            + "*3\r\n$4\r\nhget\r\n$2\r\nk2\r\n$4\r\nname\r\n"
        #expect(ahead(pipeline) == [["HGETALL", "k1"], ["HSET", "w1", "name", "x"], ["PING"], ["hget", "k2", "name"]])
        #expect(ahead(pipeline, limit: 2) == [["HGETALL", "k1"], ["HSET", "w1", "name", "x"]])
    }

    @Test func itStopsAtAnyOtherRequest() {
        #expect(ahead(Self.read + "*2\r\n$7\r\nHGETALL\r\n$2\r\nk2") == [["HGETALL", "k1"]])
        #expect(ahead(Self.read + "HGETALL k2\r\n" + Self.read) == [["HGETALL", "k1"]])
        #expect(ahead(Self.read + "*2\r\n$7\r\nHGETALL\r\n$02\r\nk2\r\n" + Self.read) == [["HGETALL", "k1"]])
        #expect(ahead("*2000\r\n" + Self.read) == [])
        #expect(ahead("") == [])
        // Before authentication, within the smaller limits only, as `decode` reads.
        let value = String(repeating: "v", count: 20_000)
        let echo = "*2\r\n$4\r\nECHO\r\n$\(value.count)\r\n\(value)\r\n"
        #expect(ahead(Self.read + echo + Self.read, authenticated: false) == [["HGETALL", "k1"]])
        #expect(ahead(Self.read + echo + Self.read).count == 3)
    }

    @Test func decodeHandsOutWhatWasReadAheadAsItWouldHaveReadIt() {
        let pipeline = Self.read + "*3\r\n$4\r\nHGET\r\n$2\r\nk2\r\n$4\r\nname\r\n" + "PING\r\n" + Self.read
        Array(pipeline.utf8).withUnsafeBytes { bytes in
            let expected = decodeAll(RESPDecoder(), bytes)
            let decoder = RESPDecoder()
            #expect(ahead(decoder, bytes).count == 2)
            let decoded = decodeAll(decoder, bytes)
            #expect(decoded.map(\.0) == expected.map(\.0))
            #expect(decoded.map(\.1) == expected.map(\.1))
            #expect(decoded.count == 4)
            // Each says which request read ahead it was, so that what a server learned of it
            // then serves again; those read afresh say none.
            #expect(decoded.map(\.2) == [0, 1, -1, -1])
            #expect(expected.map(\.2) == [-1, -1, -1, -1])
        }
    }

    @Test func whatWasReadAheadIsForgottenForOtherBytes() {
        let first = Array((Self.read + Self.read).utf8)
        let other = Array("*2\r\n$7\r\nHGETALL\r\n$2\r\nzz\r\n".utf8)
        // The same memory holding other bytes, as a worker's read buffer does for another
        // connection: decode reads them, not what was read ahead there.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: first.count, alignment: 1)
        defer { buffer.deallocate() }
        buffer.copyBytes(from: first)
        let decoder = RESPDecoder()
        #expect(ahead(decoder, UnsafeRawBufferPointer(buffer)).count == 2)
        var state = RESPDecodeState()
        _ = decoder.decode(UnsafeRawBufferPointer(buffer), state: &state, authenticated: true)
        buffer.copyBytes(from: other)
        // Not where the next request read ahead starts: read as it is.
        let result = decoder.decode(UnsafeRawBufferPointer(rebasing: buffer[0..<other.count]), state: &state, authenticated: true)
        #expect(result == .request(consumed: other.count))
        #expect(decoder.arguments.map { String(decoding: $0, as: UTF8.self) } == ["HGETALL", "zz"])
        #expect(decoder.aheadIndex == -1)
        // A limit of 0 forgets what an earlier pass read ahead.
        buffer.copyBytes(from: first)
        #expect(ahead(decoder, UnsafeRawBufferPointer(buffer), limit: 0).isEmpty)
    }

    @Test func whatWasReadAheadIsReadAgainUnderOtherAuthentication() {
        // An ECHO past the unauthenticated bulk limit: read ahead for an authenticated
        // connection, refused to one that is not.
        let value = String(repeating: "v", count: 20_000)
        let bytes = Array(("*2\r\n$4\r\nECHO\r\n$\(value.count)\r\n\(value)\r\n" + Self.read).utf8)
        bytes.withUnsafeBytes { bytes in
            var fresh = RESPDecodeState()
            let unauthenticated = RESPDecoder().decode(bytes, state: &fresh, authenticated: false)
            #expect(unauthenticated != .request(consumed: bytes.count - Self.read.utf8.count))
            let decoder = RESPDecoder()
            #expect(ahead(decoder, bytes, authenticated: true).count == 2)
            var state = RESPDecodeState()
            #expect(decoder.decode(bytes, state: &state, authenticated: false) == unauthenticated)
        }
    }
}
