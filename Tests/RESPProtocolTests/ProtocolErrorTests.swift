import RESPProtocol
import Testing

@Test func protocolErrorsAreRedissTexts() {
    let expected: [(RESPProtocolError, String)] = [
        (.invalidMultibulkLength, "-ERR Protocol error: invalid multibulk length\r\n"),
        (.invalidBulkLength, "-ERR Protocol error: invalid bulk length\r\n"),
        (.tooBigInlineRequest, "-ERR Protocol error: too big inline request\r\n"),
        (.unbalancedQuotes, "-ERR Protocol error: unbalanced quotes in request\r\n"),
        (.expectedDollar(got: UInt8(ascii: "f")), "-ERR Protocol error: expected '$', got 'f'\r\n"),
        (.unauthenticatedMultibulkLength, "-ERR Protocol error: unauthenticated multibulk length\r\n"),
        (.unauthenticatedBulkLength, "-ERR Protocol error: unauthenticated bulk length\r\n"),
        (.tooBigMultibulkCountString, "-ERR Protocol error: too big mbulk count string\r\n"),
        (.tooBigBulkCountString, "-ERR Protocol error: too big bulk count string\r\n"),
        (.tooBigRequest, "-ERR Protocol error: too big request\r\n"),
    ]
    for (error, text) in expected {
        #expect(reply(error) == bytes(text))
    }
}

/// Redis prints the byte with %c, as it is, then turns CR and LF into spaces.
@Test func theUnexpectedByteIsPrintedAsRedisPrintsIt() {
    let prefix = bytes("-ERR Protocol error: expected '$', got '")
    let suffix = bytes("'\r\n")
    for byte in UInt8(1)...UInt8.max {
        let printed: UInt8 = byte == 0x0D || byte == 0x0A ? 0x20 : byte
        #expect(reply(.expectedDollar(got: byte)) == prefix + [printed] + suffix, "byte \(byte)")
    }
}
