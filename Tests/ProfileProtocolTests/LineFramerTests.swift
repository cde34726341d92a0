import ProfileProtocol
import Testing

/// What a server loop does with the framer: buffer received chunks, take complete
/// lines off the front, and stop at the first TOOLONG.
private struct FramedStream {
    var lines: [[UInt8]] = []
    var tooLong = false
    var largestBuffered = 0

    init(_ input: [UInt8], chunkSize: Int, maxLine: Int) {
        var buffer: [UInt8] = []
        var offset = 0
        feeding: while offset < input.count {
            let chunkEnd = min(offset + chunkSize, input.count)
            buffer += input[offset..<chunkEnd]
            offset = chunkEnd
            largestBuffered = max(largestBuffered, buffer.count)
            while true {
                let result = buffer.withUnsafeBytes { LineFramer.nextLine(in: $0, maxLine: maxLine) }
                switch result {
                case .line(let contentCount, let consumed):
                    lines.append(Array(buffer[..<contentCount]))
                    buffer.removeFirst(consumed)
                case .needMore:
                    continue feeding
                case .tooLong:
                    tooLong = true
                    break feeding
                }
            }
        }
    }
}

private func frame(_ text: String, maxLine: Int = 64) -> FrameResult {
    Array(text.utf8).withUnsafeBytes { LineFramer.nextLine(in: $0, maxLine: maxLine) }
}

@Test func aLineEndsAtItsLF() {
    #expect(frame("GET 1\nPING\n") == .line(contentCount: 5, consumed: 6))
}

@Test func oneCRBeforeTheLFIsDropped() {
    #expect(frame("GET 1\r\nPING\n") == .line(contentCount: 5, consumed: 7))
    #expect(frame("GET 1\r\r\n") == .line(contentCount: 6, consumed: 8))
    #expect(frame("\r\n") == .line(contentCount: 0, consumed: 2))
    #expect(frame("\n") == .line(contentCount: 0, consumed: 1))
}

@Test func aCRElsewhereStaysInTheContent() {
    #expect(frame("GET\r1\n") == .line(contentCount: 5, consumed: 6))
    #expect(frame("\rGET\n") == .line(contentCount: 4, consumed: 5))
}

@Test func withoutALFItNeedsMore() {
    #expect(frame("") == .needMore)
    #expect(frame("GET 1") == .needMore)
    #expect(frame("GET 1\r") == .needMore)
}

@Test func aLineMayBeMaxLineBytesCountingItsLF() {
    let maxLine = 16
    // Content of maxLine - 2 and maxLine - 1 bytes: lines of maxLine - 1 and maxLine bytes.
    #expect(frame(String(repeating: "a", count: 14) + "\n", maxLine: maxLine) == .line(contentCount: 14, consumed: 15))
    #expect(frame(String(repeating: "a", count: 15) + "\n", maxLine: maxLine) == .line(contentCount: 15, consumed: 16))
    // maxLine + 1 bytes with the LF: too long, even though the LF has arrived.
    #expect(frame(String(repeating: "a", count: 16) + "\n", maxLine: maxLine) == .tooLong)
    // The CR counts too.
    #expect(frame(String(repeating: "a", count: 14) + "\r\n", maxLine: maxLine) == .line(contentCount: 14, consumed: 16))
    #expect(frame(String(repeating: "a", count: 15) + "\r\n", maxLine: maxLine) == .tooLong)
}

@Test func tooLongAsSoonAsMoreThanMaxLineBytesHaveNoLF() {
    let maxLine = 16
    #expect(frame(String(repeating: "a", count: 15), maxLine: maxLine) == .needMore)
    // maxLine bytes may still end in their LF with the next one.
    #expect(frame(String(repeating: "a", count: 16), maxLine: maxLine) == .needMore)
    #expect(frame(String(repeating: "a", count: 15) + "\r", maxLine: maxLine) == .needMore)
    #expect(frame(String(repeating: "a", count: 17), maxLine: maxLine) == .tooLong)
    #expect(frame(String(repeating: "a", count: 18), maxLine: maxLine) == .tooLong)
}

@Test func onlyTheFirstLineCountsAgainstTheLimit() {
    #expect(frame("PING\n" + String(repeating: "a", count: 100), maxLine: 16) == .line(contentCount: 4, consumed: 5))
}

@Test func everyChunkSizeGivesTheSameLines() {
    let input = Array("PING\r\nGET 1\n\n  \t \nSET a \"b c\" d\r\r\nx\ry\n\r\nQUIT".utf8)
    let expected = ["PING", "GET 1", "", "  \t ", "SET a \"b c\" d\r", "x\ry", ""].map { Array($0.utf8) }
    for chunkSize in 1...input.count {
        let stream = FramedStream(input, chunkSize: chunkSize, maxLine: 64)
        #expect(stream.lines == expected, "chunk size \(chunkSize)")
        #expect(!stream.tooLong, "chunk size \(chunkSize)")
    }
}

@Test func everyChunkSizeStopsAtTheSameTooLongLine() {
    let maxLine = 8
    // Lines of maxLine - 1 and maxLine bytes pass; the third has maxLine + 1 with its LF.
    let input = Array("abcdef\nabcdefg\nabcdefgh\nPING\n".utf8)
    for chunkSize in 1...input.count {
        let stream = FramedStream(input, chunkSize: chunkSize, maxLine: maxLine)
        #expect(stream.lines == [Array("abcdef".utf8), Array("abcdefg".utf8)], "chunk size \(chunkSize)")
        #expect(stream.tooLong, "chunk size \(chunkSize)")
        // It decides on the first byte past maxLine: no more than maxLine bytes of one line
        // wait for the chunk that brings it.
        #expect(stream.largestBuffered <= maxLine + chunkSize, "chunk size \(chunkSize)")
    }
}

@Test func everyChunkSizeWaitsOnMaxLineBytesWithoutAnLF() {
    let maxLine = 8
    let input = Array("PING\nabcdefgh".utf8)
    for chunkSize in 1...input.count {
        let stream = FramedStream(input, chunkSize: chunkSize, maxLine: maxLine)
        #expect(stream.lines == [Array("PING".utf8)], "chunk size \(chunkSize)")
        #expect(!stream.tooLong, "chunk size \(chunkSize)")
        #expect(FramedStream(input + [0x61], chunkSize: chunkSize, maxLine: maxLine).tooLong, "chunk size \(chunkSize)")
    }
}
