@testable import RESPProtocol
import Testing

/// Every request form in one stream, as a client might pipeline them.
private let mixedStream = multibulk("HGET", "user:1", "name") + bytes("PING\r\n\r\n*0\r\n")
    + bytes(#"HSET k name "Fran \"F\" Li" portraitUri 'x\'y'"# + "\r\n") + multibulk([bytes("ECHO"), [0x00, 0x0D, 0x0A]])
    + bytes("*-1\r\n  \n") + multibulk("DEL", "a", "b", "c") + bytes("QUIT\n")

@Test func everyChunkSizeGivesTheSameRequests() {
    let expected: [Event] = [
        request("HGET", "user:1", "name"), request("PING"), .skipped, .skipped,
        request("HSET", "k", "name", "Fran \"F\" Li", "portraitUri", "x'y"), .request([bytes("ECHO"), [0x00, 0x0D, 0x0A]]),
        .skipped, .skipped, request("DEL", "a", "b", "c"), request("QUIT"),
    ]
    for chunkSize in 1...mixedStream.count {
        #expect(decodeStream(mixedStream, chunkSize: chunkSize) == Decoded(events: expected, pending: 0), "chunk size \(chunkSize)")
    }
}

@Test func everyChunkSizeStopsAtTheSameError() {
    let broken: [(String, RESPProtocolError)] = [
        ("*2\r\n$4\r\nECHO\r\n%1\r\n", .expectedDollar(got: UInt8(ascii: "%"))),
        ("*2\r\n$4\r\nECHO\r\n$-5\r\n", .invalidBulkLength),
        ("*x\r\n", .invalidMultibulkLength),
        ("ECHO \"a\r\n", .unbalancedQuotes),
    ]
    for (tail, error) in broken {
        let input = mixedStream + bytes(tail) + multibulk("PING")
        let expected = decodeStream(mixedStream).events + [.error(error)]
        for chunkSize in 1...input.count {
            #expect(decodeStream(input, chunkSize: chunkSize).events == expected, "\(tail) in chunks of \(chunkSize)")
        }
    }
}

@Test func everyChunkSizeWaitsOnTheSameUnfinishedRequest() {
    let unfinished = bytes("*3\r\n$4\r\nHGET\r\n$6\r\nuser:1\r\n$4\r\nna")
    for chunkSize in 1...unfinished.count {
        let decoded = decodeStream(multibulk("PING") + unfinished, chunkSize: chunkSize)
        #expect(decoded == Decoded(events: [request("PING")], pending: unfinished.count), "chunk size \(chunkSize)")
    }
}

/// A long inline line arriving a byte at a time is searched for its LF once, not once per byte.
@Test func aResumedInlineLineIsNotSearchedAgain() {
    let decoder = RESPDecoder()
    var state = RESPDecodeState()
    let line = bytes("ECHO ") + repeated("x", 1000) + bytes("\r\n")
    for count in 1..<line.count {
        let outcome = Array(line.prefix(count)).withUnsafeBytes { decoder.decode($0, state: &state, authenticated: true) }
        #expect(outcome == .needMore)
        #expect(state.searched == count, "after \(count) bytes")
    }
    let outcome = line.withUnsafeBytes { decoder.decode($0, state: &state, authenticated: true) }
    #expect(outcome == .request(consumed: line.count))
    #expect(state == RESPDecodeState())
}

/// One decoder serves many connections, each with its own state: a request half read on one
/// connection is unaffected by whole requests decoded for another in between.
@Test func oneDecoderServesInterleavedConnections() {
    let decoder = RESPDecoder()
    let first = multibulk("HMGET", "k", "name", "portraitUri")
    var firstState = RESPDecodeState()
    var otherState = RESPDecodeState()
    for split in 1..<first.count {
        let head = Array(first.prefix(split))
        #expect(head.withUnsafeBytes { decoder.decode($0, state: &firstState, authenticated: true) } == .needMore)
        let other = multibulk("PING", "x")
        #expect(other.withUnsafeBytes { decoder.decode($0, state: &otherState, authenticated: true) } == .request(consumed: other.count))
        #expect(first.withUnsafeBytes { decoder.decode($0, state: &firstState, authenticated: true) } == .request(consumed: first.count))
        #expect(decoder.arguments.map { Array($0) } == [bytes("HMGET"), bytes("k"), bytes("name"), bytes("portraitUri")])
    }
}
