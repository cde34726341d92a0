@testable import RESPProtocol
import Testing

private func arguments(_ count: Int) -> [[UInt8]] {
    (0..<count).map { bytes("a\($0)") }
}

@Test func aRequestMayHoldMaxArguments() {
    #expect(events(multibulk(arguments(1024))) == [.request(arguments(1024))])
    #expect(events(multibulk(arguments(1025))) == [.error(.invalidMultibulkLength)])
    // Decided on the count line, before any argument has arrived.
    #expect(decodeStream("*1025\r\n").events == [.error(.invalidMultibulkLength)])
    let inline1024 = arguments(1024).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
    #expect(events(inline1024 + "\r\n") == [.request(arguments(1024))])
    #expect(events(inline1024 + " x\r\n") == [.error(.tooBigInlineRequest)])
    // Unbalanced quotes past the limit still come first, as in Redis, which has no such limit.
    #expect(events(inline1024 + " x \"y\r\n") == [.error(.unbalancedQuotes)])
}

@Test func aBulkStringMayHoldMaxBulkBytes() {
    let atLimit = [bytes("ECHO"), repeated("v", 65536)]
    #expect(events(multibulk(atLimit)) == [.request(atLimit)])
    #expect(events(multibulk([bytes("ECHO"), repeated("v", 65537)])) == [.error(.invalidBulkLength)])
    #expect(decodeStream("*2\r\n$4\r\nECHO\r\n$65537\r\n").events == [.error(.invalidBulkLength)])
}

@Test func anInlineRequestMayHoldMaxInlineBytesBeforeItsLF() {
    let limits = RESPLimits(maxInlineBytes: 16)
    // Sixteen bytes before the LF, the CR counted: fine.
    #expect(events("ECHO 0123456789\r\n", limits: limits) == [request("ECHO", "0123456789")])
    #expect(events("ECHO 01234567890\n", limits: limits) == [request("ECHO", "01234567890")])
    // Seventeen: too big, whether the LF has arrived or not.
    #expect(events("ECHO 01234567890\r\n", limits: limits) == [.error(.tooBigInlineRequest)])
    #expect(events("ECHO 012345678901\n", limits: limits) == [.error(.tooBigInlineRequest)])
    #expect(decodeStream("ECHO 01234567890\r", limits: limits).events == [.error(.tooBigInlineRequest)])
    #expect(decodeStream("ECHO 01234567890", limits: limits) == Decoded(events: [], pending: 16))
    // The default limit.
    let atLimit = repeated("x", 65536)
    #expect(events(atLimit + bytes("\n")) == [.request([atLimit])])
    #expect(events(atLimit + bytes("x\n")) == [.error(.tooBigInlineRequest)])
    #expect(decodeStream(atLimit + bytes("x")).events == [.error(.tooBigInlineRequest)])
}

@Test func aCountLineMayHoldMaxInlineBytesBeforeItsCR() {
    let limits = RESPLimits(maxInlineBytes: 16)
    let longCount = "*" + String(repeating: "1", count: 15)
    // Sixteen bytes and the CR: a count line of the right length, but not a number we take.
    #expect(events(longCount + "\r\n", limits: limits) == [.error(.invalidMultibulkLength)])
    #expect(decodeStream(longCount, limits: limits) == Decoded(events: [], pending: 16))
    #expect(events(longCount + "1\r\n", limits: limits) == [.error(.tooBigMultibulkCountString)])
    #expect(decodeStream(longCount + "1", limits: limits).events == [.error(.tooBigMultibulkCountString)])
    // Any seventeenth byte decides, a NUL too.
    #expect(decodeStream(bytes(longCount) + [0x00], limits: limits).events == [.error(.tooBigMultibulkCountString)])
}

@Test func aLengthLineMayHoldMaxInlineBytesBeforeItsCR() {
    let limits = RESPLimits(maxInlineBytes: 16)
    let longLength = "*1\r\n$" + String(repeating: "1", count: 15)
    #expect(events(longLength + "\r\n", limits: limits) == [.error(.invalidBulkLength)])
    #expect(decodeStream(longLength, limits: limits) == Decoded(events: [], pending: 20))
    #expect(events(longLength + "1\r\n", limits: limits) == [.error(.tooBigBulkCountString)])
    // Redis reads the `$` only once the line's end is there.
    #expect(events("*1\r\n" + String(repeating: "x", count: 17), limits: limits) == [.error(.tooBigBulkCountString)])
    #expect(decodeStream("*1\r\n" + String(repeating: "x", count: 16), limits: limits).events == [])
}

@Test func aRequestMayHoldMaxRequestPayloadBytes() {
    let sixteen = [bytes("ECHO")] + Array(repeating: repeated("v", 65536), count: 15) + [repeated("v", 65536 - 4)]
    #expect(events(multibulk(sixteen)) == [.request(sixteen)])
    var over = sixteen
    over[16].append(0x76)
    #expect(events(multibulk(over)) == [.error(.tooBigRequest)])
    // Decided on the length line that goes over, before its body arrives.
    let header = multibulk(Array(sixteen.prefix(16))).dropFirst(5)
    #expect(decodeStream(bytes("*17\r\n") + header + bytes("$65533\r\n")).events == [.error(.tooBigRequest)])
    #expect(decodeStream(bytes("*17\r\n") + header + bytes("$65532\r\n")).events == [])
}

@Test func beforeAuthenticationARequestMayHoldTenArgumentsOfSixteenKiB() {
    #expect(events(multibulk(arguments(10)), authenticated: false) == [.request(arguments(10))])
    #expect(events(multibulk(arguments(11)), authenticated: false) == [.error(.unauthenticatedMultibulkLength)])
    #expect(events(multibulk(arguments(11)), authenticated: true) == [.request(arguments(11))])
    let atLimit = [bytes("AUTH"), repeated("t", 16384)]
    #expect(events(multibulk(atLimit), authenticated: false) == [.request(atLimit)])
    let over = [bytes("AUTH"), repeated("t", 16385)]
    #expect(events(multibulk(over), authenticated: false) == [.error(.unauthenticatedBulkLength)])
    #expect(events(multibulk(over), authenticated: true) == [.request(over)])
    // Past the authenticated limits the error is the same as when authenticated, as in Redis.
    #expect(decodeStream("*1025\r\n", authenticated: false).events == [.error(.invalidMultibulkLength)])
    #expect(decodeStream("*1\r\n$65537\r\n", authenticated: false).events == [.error(.invalidBulkLength)])
    // Redis does not limit inline requests before authentication beyond their length.
    let inline = arguments(11).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
    #expect(events(inline + "\r\n", authenticated: false) == [.request(arguments(11))])
}

/// A receive buffer of `receiveBufferBytes` always gets an answer: the longest wait is a
/// request at every limit, with its last length line as long as a line may get.
@Test func theReceiveBufferBoundCoversTheLongestWait() {
    let limits = RESPLimits(maxArguments: 4, maxBulkBytes: 10, maxInlineBytes: 32, maxRequestPayloadBytes: 30)
    #expect(limits.receiveBufferBytes == 4 + 4 * (5 + 2) + 30 + 32 + 2)
    let bodies = [repeated("a", 10), repeated("b", 10), repeated("c", 10)]
    let longest: [UInt8] = Array(multibulk(bodies + [[]]).dropLast(6)) + bytes("$") + repeated("0", 31)
    let waiting = decodeStream(Array(longest), limits: limits)
    #expect(waiting == Decoded(events: [], pending: longest.count))
    #expect(longest.count < limits.receiveBufferBytes)
    #expect(decodeStream(Array(longest) + [0x30], limits: limits).events == [.error(.tooBigBulkCountString)])
    #expect(RESPLimits().receiveBufferBytes == 7 + 1024 * 10 + (1 << 20) + 65536 + 2)
}
