import RESPProtocol
import Testing

/// What a writer wrote, checked against its size function.
private func encoded(count: Int, _ write: (UnsafeMutableRawPointer) -> Int, sourceLocation: SourceLocation = #_sourceLocation) -> String {
    let result = written(count: count, write)
    #expect(result.exact, "the size function and the writer disagree", sourceLocation: sourceLocation)
    return String(decoding: result.bytes, as: UTF8.self)
}

private func fixed(_ reply: StaticString) -> String {
    encoded(count: reply.utf8CodeUnitCount) { RESPEncoder.write(reply, to: $0) }
}

@Test func simpleStringsAndErrors() {
    #expect(encoded(count: RESPEncoder.simpleStringCount("OK")) { RESPEncoder.writeSimpleString("OK", to: $0) } == "+OK\r\n")
    #expect(encoded(count: RESPEncoder.simpleStringCount("")) { RESPEncoder.writeSimpleString("", to: $0) } == "+\r\n")
    #expect(encoded(count: RESPEncoder.errorCount("ERR syntax error")) { RESPEncoder.writeError("ERR syntax error", to: $0) }
        == "-ERR syntax error\r\n")
}

@Test func anErrorMadeAtRunTimeStaysOneLine() {
    let text = bytes("ERR bad\r\nname\r")
    let reply = text.withUnsafeBytes { raw in
        encoded(count: RESPEncoder.errorCount(raw)) { RESPEncoder.writeError(raw, to: $0) }
    }
    #expect(reply == "-ERR bad  name \r\n")
}

@Test func integersInEveryRange() {
    let cases: [(Int64, String)] = [(0, ":0\r\n"), (1, ":1\r\n"), (-1, ":-1\r\n"), (-2, ":-2\r\n"), (10, ":10\r\n"),
                                    (1_000_000, ":1000000\r\n"), (-987654321, ":-987654321\r\n"),
                                    (.max, ":9223372036854775807\r\n"), (.min, ":-9223372036854775808\r\n")]
    for (value, expected) in cases {
        #expect(encoded(count: RESPEncoder.integerCount(value)) { RESPEncoder.writeInteger(value, to: $0) } == expected)
    }
}

@Test func bulkStrings() {
    for (value, expected) in [("", "$0\r\n\r\n"), ("profiled", "$8\r\nprofiled\r\n"), ("a\r\nb", "$4\r\na\r\nb\r\n"),
                              (String(repeating: "x", count: 10), "$10\r\n" + String(repeating: "x", count: 10) + "\r\n")] {
        let reply = bytes(value).withUnsafeBytes { raw in
            encoded(count: RESPEncoder.bulkStringCount(length: raw.count)) { RESPEncoder.writeBulkString(raw, to: $0) }
        }
        #expect(reply == expected)
    }
    #expect(encoded(count: RESPEncoder.bulkStringCount(length: 10)) { RESPEncoder.writeBulkString("standalone", to: $0) }
        == "$10\r\nstandalone\r\n")
    let binary: [UInt8] = [0x00, 0xFF, 0x0A]
    let result = binary.withUnsafeBytes { raw in
        written(count: RESPEncoder.bulkStringCount(length: 3)) { RESPEncoder.writeBulkString(raw, to: $0) }
    }
    #expect(result.exact && result.bytes == bytes("$3\r\n") + binary + bytes("\r\n"))
}

@Test func nullsDependOnTheVersion() {
    #expect(fixed(RESPEncoder.nullBulkString(.resp2)) == "$-1\r\n")
    #expect(fixed(RESPEncoder.nullBulkString(.resp3)) == "_\r\n")
    #expect(fixed(RESPEncoder.nullArray(.resp2)) == "*-1\r\n")
    #expect(fixed(RESPEncoder.nullArray(.resp3)) == "_\r\n")
}

@Test func arrayAndMapHeaders() {
    for (count, expected) in [(0, "*0\r\n"), (3, "*3\r\n"), (1000, "*1000\r\n")] {
        #expect(encoded(count: RESPEncoder.arrayHeaderCount(count)) { RESPEncoder.writeArrayHeader(count, to: $0) } == expected)
    }
    // RESP2 has no maps: Redis sends a map's keys and values as one flat array.
    let maps: [(Int, RESPVersion, String)] = [(0, .resp3, "%0\r\n"), (7, .resp3, "%7\r\n"), (0, .resp2, "*0\r\n"),
                                              (7, .resp2, "*14\r\n"), (50, .resp2, "*100\r\n"), (50, .resp3, "%50\r\n")]
    for (pairs, version, expected) in maps {
        #expect(encoded(count: RESPEncoder.mapHeaderCount(pairs, version)) { RESPEncoder.writeMapHeader(pairs, version, to: $0) } == expected)
    }
}

/// A whole HGETALL reply, as a server would put it together, in both versions.
@Test func aMapReplyInBothVersions() {
    for (version, header) in [(RESPVersion.resp2, "*4\r\n"), (.resp3, "%2\r\n")] {
        let fields: [StaticString] = ["name", "Fran", "portraitUri", "p"]
        var count = RESPEncoder.mapHeaderCount(2, version)
        for field in fields { count += RESPEncoder.bulkStringCount(length: field.utf8CodeUnitCount) }
        let reply = encoded(count: count) { out in
            var n = RESPEncoder.writeMapHeader(2, version, to: out)
            for field in fields { n += RESPEncoder.writeBulkString(field, to: out + n) }
            return n
        }
        #expect(reply == header + "$4\r\nname\r\n$4\r\nFran\r\n$11\r\nportraitUri\r\n$1\r\np\r\n")
    }
}
