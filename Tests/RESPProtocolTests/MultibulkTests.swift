@testable import RESPProtocol
import Testing

@Test func aMultibulkRequestGivesItsArguments() {
    #expect(events("*2\r\n$4\r\nHGET\r\n$3\r\nk:1\r\n") == [request("HGET", "k:1")])
    #expect(events("*1\r\n$4\r\nPING\r\n") == [request("PING")])
    #expect(events(multibulk([bytes("ECHO"), [0x00, 0x0D, 0x0A, 0xFF, 0x20]])) == [.request([bytes("ECHO"), [0x00, 0x0D, 0x0A, 0xFF, 0x20]])])
    #expect(events("*3\r\n$4\r\nHSET\r\n$0\r\n\r\n$0\r\n\r\n") == [request("HSET", "", "")])
}

@Test func pipelinedRequestsComeOutInOrder() {
    let input = multibulk("PING") + multibulk("HGET", "k", "name") + bytes("*0\r\n") + multibulk("QUIT")
    #expect(events(input) == [request("PING"), request("HGET", "k", "name"), .skipped, request("QUIT")])
}

@Test func aRequestConsumesExactlyItsBytes() {
    let first = multibulk("HGET", "k", "name")
    let input = first + bytes("*1\r\n$4\r\nPI")
    let decoder = RESPDecoder()
    var state = RESPDecodeState()
    let outcome = input.withUnsafeBytes { decoder.decode($0, state: &state, authenticated: true) }
    #expect(outcome == .request(consumed: first.count))
    #expect(state == RESPDecodeState())
}

@Test func argumentsAreViewsOfTheCallersBytes() {
    let input = multibulk("HGET", "key", "name")
    input.withUnsafeBytes { raw in
        let decoder = RESPDecoder()
        var state = RESPDecodeState()
        #expect(decoder.decode(raw, state: &state, authenticated: true) == .request(consumed: raw.count))
        #expect(decoder.arguments[1].baseAddress == raw.baseAddress! + 18)
    }
}

/// Redis skips a multibulk whose count is zero or negative, and answers nothing.
@Test func aCountOfZeroOrLessIsSkipped() {
    for count in ["0", "-1", "-10", "-9223372036854775808"] {
        #expect(events("*\(count)\r\n*1\r\n$4\r\nPING\r\n") == [.skipped, request("PING")], "\(count)")
    }
    // Unauthenticated too: the limit is on more than 10.
    #expect(events("*-1\r\n", authenticated: false) == [.skipped])
}

/// A count must be what Redis's string2ll reads: no sign but `-`, no leading zero, no
/// blanks, at most 20 bytes, and within Int64.
@Test func aCountThatIsNotRedissNumberIsAnInvalidMultibulkLength() {
    for count in ["", "+1", "01", "00", "-0", " 1", "1 ", "1a", "a", "0x1", "1.0", "-", "--1",
                  "-9223372036854775809", "99999999999999999999", "3000000000", "1025"] {
        #expect(events("*\(count)\r\n$4\r\nPING\r\n") == [.error(.invalidMultibulkLength)], "\(count)")
    }
    // The count line ends at the first CR: an LF before it is part of the count.
    #expect(events("*1\n$4\r\nPING\r\n") == [.error(.invalidMultibulkLength)])
}

@Test func aLengthLineMustStartWithADollar() {
    // Redis's own test: a bulk string where the next length line should be.
    #expect(events("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n") == [.error(.expectedDollar(got: UInt8(ascii: "f")))])
    #expect(events("*1\r\nfoo\r\n") == [.error(.expectedDollar(got: UInt8(ascii: "f")))])
    #expect(events("*1\r\n*1\r\n") == [.error(.expectedDollar(got: UInt8(ascii: "*")))])
    #expect(events([0x2A, 0x31, 0x0D, 0x0A, 0xFF, 0x0D, 0x0A]) == [.error(.expectedDollar(got: 0xFF))])
    #expect(events("*1\r\n\r\n") == [.error(.expectedDollar(got: 0x0D))])
    #expect(events("*1\r\n\n\r\n") == [.error(.expectedDollar(got: 0x0A))])
}

@Test func aBadLengthIsAnInvalidBulkLength() {
    for length in ["-1", "-10", "blabla", "", "+1", "01", "-0", " 1", "2000000000", "65537", "99999999999999999999"] {
        #expect(events("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$\(length)\r\n") == [.error(.invalidBulkLength)], "\(length)")
    }
}

/// Redis takes the two bytes after a bulk body for its CR LF without looking at them, and the
/// byte after a line's CR for its LF.
@Test func theLineEndsAfterABodyAndACRAreNotChecked() {
    #expect(events("*2\r\n$4\r\nECHOxy$1\r\naXY") == [request("ECHO", "a")])
    #expect(events("*1\rx$4\ryPINGzz") == [request("PING")])
    #expect(events("*1\r\n$4\r\nPING\r") == [])
    #expect(decodeStream("*1\r\n$4\r\nPING\r").pending == 13)
}

/// Redis finds a line's CR with strchr, which stops at a NUL: a line with a NUL before its
/// CR never ends, and once more than the inline limit has arrived it is too long. Redis's
/// "protocol desync" tests send `*\0` and `$\0` and expect a protocol error.
@Test func aNULBeforeALinesEndMakesItTooLongOnceTheLimitHasArrived() {
    let limits = RESPLimits(maxInlineBytes: 16)
    let tail = bytes("\r\n") + repeated("A", 32)
    let countLine = [0x2A, 0x00] + tail
    #expect(events(countLine, limits: limits) == [.error(.tooBigMultibulkCountString)])
    #expect(decodeStream(Array(countLine.prefix(16)), limits: limits) == Decoded(events: [], pending: 16))
    #expect(decodeStream(Array(countLine.prefix(17)), limits: limits).events == [.error(.tooBigMultibulkCountString)])
    let lengthLine = bytes("*1\r\n$1") + [0x00] + tail
    #expect(events(lengthLine, limits: limits) == [.error(.tooBigBulkCountString)])
    #expect(decodeStream(Array(lengthLine.prefix(4 + 16)), limits: limits).pending == 20)
    #expect(decodeStream(Array(lengthLine.prefix(4 + 17)), limits: limits).events == [.error(.tooBigBulkCountString)])
    // The NUL as the line's first byte: Redis never gets as far as expecting a `$`.
    #expect(events(bytes("*1\r\n") + [0x00] + tail, limits: limits) == [.error(.tooBigBulkCountString)])
    // In a bulk body a NUL is just a byte.
    #expect(events(multibulk([[0x00]]), limits: limits) == [.request([[0x00]])])
}

/// Arguments read in an earlier call are not read again: the state holds how far the request
/// got, and a bulk body is skipped by its length.
@Test func aResumedRequestStartsWhereTheLastCallStopped() {
    let decoder = RESPDecoder()
    var state = RESPDecodeState()
    let whole = multibulk("HSET", "key", "name", String(repeating: "v", count: 100))
    func decode(_ count: Int) -> RESPDecodeResult {
        Array(whole.prefix(count)).withUnsafeBytes { decoder.decode($0, state: &state, authenticated: true) }
    }
    #expect(decode(2) == .needMore)
    #expect(state.argumentsExpected == 0 && state.searched == 2)
    #expect(decode(4 + 10 + 2) == .needMore)  // the count, HSET, and `$3` of the next length line
    #expect(state.argumentsExpected == 4 && state.argumentsParsed == 1 && state.offset == 14 && state.searched == 2)
    let bodyStart = 4 + 10 + 9 + 10 + 6
    #expect(decode(bodyStart + 50) == .needMore)
    #expect(state.argumentsParsed == 3 && state.bulkLength == 100 && state.offset == bodyStart)
    #expect(state.payloadBytes == 4 + 3 + 4 + 100)
    #expect(decode(whole.count) == .request(consumed: whole.count))
    #expect(decoder.arguments.map { Array($0) } == [bytes("HSET"), bytes("key"), bytes("name"), repeated("v", 100)])
    #expect(state == RESPDecodeState())
}
