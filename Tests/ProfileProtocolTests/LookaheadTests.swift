import ProfileProtocol
import Testing

/// The look-ahead that lets the server prefetch the cache entries of pipelined GETs and MGETs.
@Suite struct LookaheadTests {
    private func ids(_ text: String, limit: Int = 32) -> [String] {
        var found: [String] = []
        Array(text.utf8).withUnsafeBytes { bytes in
            RequestLines.idsAhead(bytes.baseAddress!, count: bytes.count, limit: limit) { found.append(String(decoding: $0, as: UTF8.self)) }
        }
        return found
    }

    @Test func theIdsOfGetsAndMultiGetsAreFoundInOrder() {
        #expect(ids("GET a\nSET w n u\nget b\r\nMGET c d\nEXISTS e\nmget f\n") == ["a", "b", "c", "d", "f"])
        #expect(ids("GET a\nMGET c d e\n", limit: 3) == ["a", "c", "d"])
    }

    @Test func onlyCompleteLinesAreRead() {
        #expect(ids("GET a\nGET b") == ["a"])
        #expect(ids("MGET  x\n") == ["x"])
        #expect(ids("GET \"q\"\nGET c\n") == ["c"])
        #expect(ids("") == [])
    }
}
