import ProfileTestSupport
import ProfileProtocol
import WireBytes
import Testing

private func encodedString(_ value: [UInt8]) -> String {
    String(decoding: encoded(value), as: UTF8.self)
}

@Test func plainValuesAreWrittenBare() {
    #expect(encodedString(bytes("42")) == "42")
    #expect(encodedString(bytes("https://cdn.example/p/42.png")) == "https://cdn.example/p/42.png")
    #expect(encodedString(bytes("小明")) == "小明")
    #expect(encodedString(bytes("it's")) == "it's")
}

@Test func otherValuesAreQuotedWithTheDocumentedEscapes() {
    #expect(encodedString([]) == #""""#)
    #expect(encodedString(bytes("Fran Li")) == #""Fran Li""#)
    #expect(encodedString(bytes("a\"b")) == #""a\"b""#)
    #expect(encodedString(bytes(#"a\b"#)) == #""a\\b""#)
    #expect(encodedString([0x0A, 0x0D, 0x09]) == #""\n\r\t""#)
    #expect(encodedString([0x01, 0x1F, 0x7F, 0x0B]) == #""\x01\x1f\x7f\x0b""#)
    #expect(encodedString(bytes("é ")) == "\"é \"")
}

@Test func eachByteIsBareOrEscapedAsDocumented() {
    for byte in UInt8.min...UInt8.max {
        let expected: String
        switch byte {
        case 0x22: expected = #""a\"b""#
        case 0x5C: expected = #""a\\b""#
        case 0x0A: expected = #""a\nb""#
        case 0x0D: expected = #""a\rb""#
        case 0x09: expected = #""a\tb""#
        case 0x20: expected = #""a b""#
        case 0..<0x20, 0x7F: expected = "\"a\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16) + "b\""
        default: expected = "a" + String(decoding: [byte], as: UTF8.self) + "b"
        }
        let actual = encoded([0x61, byte, 0x62])
        if byte >= 0x80 {
            #expect(actual == [0x61, byte, 0x62], "byte \(byte) passes as it is")
        } else {
            #expect(String(decoding: actual, as: UTF8.self) == expected, "byte \(byte)")
        }
    }
}

@Test func aSpecialByteAnywhereInAValueOfAnyLengthQuotesIt() {
    // Every length up to three words and a bit, so every place a word or the tail reads.
    for length in 1...27 {
        for special: UInt8 in [0x00, 0x09, 0x0A, 0x0D, 0x1F, 0x20, 0x22, 0x5C, 0x7F] {
            for offset in 0..<length {
                var value = repeated("a", length)
                value[offset] = special
                #expect(encoded(value).first == 0x22, "byte \(special) at offset \(offset) of \(length)")
            }
        }
        // Bytes just beside the special ones, and those of UTF-8, stay bare.
        for neighbour: UInt8 in [0x21, 0x23, 0x5B, 0x5D, 0x7E, 0x80, 0xC3, 0xFF] {
            let value = repeated("a", length - 1) + [neighbour]
            #expect(encoded(value) == value, "byte \(neighbour) at the end of \(length)")
        }
    }
    let plain = Array(0x21...0x7E).filter { $0 != 0x22 && $0 != 0x5C }.map(UInt8.init) + bytes("é明")
    #expect(encoded(plain) == plain)
}

@Test func encodedCountMatchesWhatIsWrittenAndStaysWithinTheBound() {
    var values: [[UInt8]] = [[], bytes("x"), bytes("Fran Li"), repeated("\u{7F}", 10), Array(0...255)]
    values += (UInt8.min...UInt8.max).map { [$0] }
    for value in values {
        let count = value.withUnsafeBytes { ValueEncoder.encodedCount($0) }
        let result = written(count: count) { out in value.withUnsafeBytes { ValueEncoder.write($0, to: out) } }
        #expect(result.exact, "\(value)")
        #expect(result.bytes == encoded(value))
        #expect(count <= ValueEncoder.maxExpansion * value.count + 2)
    }
}

/// Round trip: what the encoder writes, the tokenizer reads back as one token.
private func roundTrips(_ value: [UInt8]) -> Bool {
    (try? LineTokenizer.tokens(of: encoded(value))) == [value]
}

@Test func everyByteRoundTripsInsideValidUTF8() {
    for byte in UInt8(1)..<0x80 {
        #expect(roundTrips([byte]), "byte \(byte)")
        #expect(roundTrips([0x61, byte, 0x62]), "byte \(byte) inside")
    }
    // Every byte from 0x80 up appears in some scalar: each continuation byte in
    // U+0080...U+07FF, each lead byte in the scalars picked below.
    var scalars = Array(0x80...0x7FF)
    scalars += stride(from: 0x800, through: 0x10FFFF, by: 0x1000).map { $0 | 0x123 }
    for value in scalars {
        guard let scalar = Unicode.Scalar(value) else {
            continue
        }
        let utf8 = Array(String(Character(scalar)).utf8)
        #expect(roundTrips(utf8), "U+\(String(value, radix: 16))")
        #expect(roundTrips([0x20] + utf8 + [0x7F]), "U+\(String(value, radix: 16)) quoted")
    }
}

@Test func randomUTF8StringsRoundTrip() {
    var generator = SeededGenerator(seed: 0x5EED)
    let pools: [ClosedRange<UInt32>] = [0x01...0x7F, 0x80...0x7FF, 0x800...0xFFFF, 0x10000...0x10FFFF]
    for _ in 0..<500 {
        var text = ""
        for _ in 0..<Int.random(in: 0...40, using: &generator) {
            let pool = pools.randomElement(using: &generator)!
            if let scalar = Unicode.Scalar(UInt32.random(in: pool, using: &generator)) {
                text.unicodeScalars.append(scalar)
            }
        }
        #expect(roundTrips(bytes(text)), "\(text.debugDescription)")
    }
}

@Test func valueAndNotFoundLines() {
    func valueLine(_ id: [UInt8], _ name: [UInt8], _ uri: [UInt8]) -> (bytes: [UInt8], exact: Bool) {
        id.withUnsafeBytes { id in
            name.withUnsafeBytes { name in
                uri.withUnsafeBytes { uri in
                    let count = ReplyEncoder.valueLineCount(userId: id, name: name, portraitUri: uri)
                    return written(count: count) { ReplyEncoder.writeValueLine(userId: id, name: name, portraitUri: uri, to: $0) }
                }
            }
        }
    }
    let plain = valueLine(bytes("42"), bytes("小明"), bytes("https://cdn.example/p/42.png"))
    #expect(plain.exact)
    #expect(plain.bytes == bytes("VALUE 42 小明 https://cdn.example/p/42.png\n"))
    let quoted = valueLine(bytes("4 2"), bytes("Fran Li"), [])
    #expect(quoted.exact)
    #expect(quoted.bytes == bytes(#"VALUE "4 2" "Fran Li" """# + "\n"))

    let notFound = bytes("a\tb").withUnsafeBytes { id in
        written(count: ReplyEncoder.notFoundLineCount(userId: id)) { ReplyEncoder.writeNotFoundLine(userId: id, to: $0) }
    }
    #expect(notFound.exact)
    #expect(notFound.bytes == bytes(#"NOTFOUND "a\tb""# + "\n"))
}

@Test func numberAndStatLines() {
    for value: UInt64 in [0, 7, 10, 999, 1000, UInt64.max] {
        let stored = written(count: ReplyEncoder.numberLineCount("STORED", value)) {
            ReplyEncoder.writeNumberLine("STORED", value, to: $0)
        }
        #expect(stored.exact)
        #expect(stored.bytes == bytes("STORED \(value)\n"))
        let stat = written(count: ReplyEncoder.statLineCount(name: "cmd_get", value: value)) {
            ReplyEncoder.writeStatLine(name: "cmd_get", value: value, to: $0)
        }
        #expect(stat.exact)
        #expect(stat.bytes == bytes("STAT cmd_get \(value)\n"))
    }
    let kind = written(count: ReplyEncoder.statLineCount(name: "store_kind", text: "postgres")) {
        ReplyEncoder.writeStatLine(name: "store_kind", text: "postgres", to: $0)
    }
    #expect(kind.exact)
    #expect(kind.bytes == bytes("STAT store_kind postgres\n"))
}

@Test func fixedReplies() {
    let replies = [ReplyEncoder.pong, ReplyEncoder.stored, ReplyEncoder.updated, ReplyEncoder.deleted, ReplyEncoder.yes,
                   ReplyEncoder.no, ReplyEncoder.ok, ReplyEncoder.bye, ReplyEncoder.end]
    let texts = replies.map { reply in
        let result = written(count: reply.utf8CodeUnitCount) { ReplyEncoder.write(reply, to: $0) }
        #expect(result.exact)
        return String(decoding: result.bytes, as: UTF8.self)
    }
    #expect(texts == ["PONG\n", "STORED\n", "UPDATED\n", "DELETED\n", "YES\n", "NO\n", "OK\n", "BYE\n", "END\n"])
}

/// The worker reserves reply room by the bound, so a line must never encode longer than it.
@Test(arguments: [
    ([], [], []),
    ([0x01], [0x7F, 0x00], Array(repeating: 0x1F, count: 300)),
    (Array("4 2".utf8), Array("\"\\\n".utf8), Array("https://cdn.example/p.png".utf8)),
    (Array(repeating: 0x41, count: 255), Array("小明".utf8), [0xFF, 0x20]),
] as [([UInt8], [UInt8], [UInt8])])
func valueLineBoundIsNeverBelowTheLine(id: [UInt8], name: [UInt8], uri: [UInt8]) {
    id.withUnsafeBytes { id in
        name.withUnsafeBytes { name in
            uri.withUnsafeBytes { uri in
                let count = ReplyEncoder.valueLineCount(userId: id, name: name, portraitUri: uri)
                let bound = ReplyEncoder.valueLineBound(userId: id, name: name, portraitUri: uri)
                #expect(bound >= count)
                let line = written(count: bound) { ReplyEncoder.writeValueLine(userId: id, name: name, portraitUri: uri, to: $0) }
                #expect(line.bytes.count == count)
            }
        }
    }
}

/// Decimal numbers as both fronts write them (lengths, counts, STATS values): each short-cut
/// agrees with the general case at its edges.
@Test func decimalsAreWrittenAsSwiftPrintsThem() {
    let values: [UInt64] = Array(0...1_100) + [9_999, 10_000, 99_999, 123_456_789, UInt64.max]
    var out = [UInt8](repeating: 0, count: 24)
    for value in values {
        let count = out.withUnsafeMutableBytes { writeDecimal(value, to: $0.baseAddress!) }
        #expect(String(decoding: out[..<count], as: UTF8.self) == String(value))
        #expect(count == decimalCount(value))
    }
}
