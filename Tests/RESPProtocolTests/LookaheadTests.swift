import RESPProtocol
import Testing

/// The look-ahead that lets the server prefetch the cache entries of pipelined key reads.
@Suite struct LookaheadTests {
    private func keys(_ text: String, limit: Int = 32) -> [String] {
        var found: [String] = []
        Array(text.utf8).withUnsafeBytes { bytes in
            RESPDecoder.keysAhead(bytes.baseAddress!, count: bytes.count, limit: limit) { found.append(String(decoding: $0, as: UTF8.self)) }
        }
        return found
    }

    @Test func theKeysOfWholeKeyReadsAreFoundInOrder() {
        let pipeline = "*2\r\n$7\r\nHGETALL\r\n$2\r\nk1\r\n"
            + "*4\r\n$4\r\nHSET\r\n$2\r\nw1\r\n$4\r\nname\r\n$1\r\nx\r\n"
            + "*1\r\n$4\r\nPING\r\n"
            + "*3\r\n$4\r\nhget\r\n$2\r\nk2\r\n$4\r\nname\r\n"
            + "*3\r\n$6\r\nEXISTS\r\n$2\r\ne1\r\n$2\r\ne2\r\n"
            + "*2\r\n$7\r\nHGETALL\r\n$2\r\nk3\r\n"
        #expect(keys(pipeline) == ["k1", "k2", "k3"])
        #expect(keys(pipeline, limit: 4) == ["k1", "k2"])
    }

    @Test func itStopsAtWhatItDoesNotExpect() {
        let read = "*2\r\n$7\r\nHGETALL\r\n$2\r\nk1\r\n"
        #expect(keys(read + "*2\r\n$7\r\nHGETALL\r\n$2\r\nk2") == ["k1"])
        #expect(keys(read + "HGETALL k2\r\n" + read) == ["k1"])
        #expect(keys(read + "*2\r\n$7\r\nHGETALL\r\n$x\r\nk2\r\n" + read) == ["k1"])
        #expect(keys("*2000\r\n" + read) == [])
        #expect(keys("") == [])
    }
}
