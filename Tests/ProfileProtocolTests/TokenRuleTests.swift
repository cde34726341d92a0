@testable import ProfileProtocol
import Testing
import WireBytes

private func tokens(_ line: String) -> [[UInt8]]? {
    try? tokenize(bytes(line)).get()
}

private func parseFails(_ line: [UInt8]) -> Bool {
    if case .failure(let error) = tokenize(line) {
        return error.code == .parse
    }
    return false
}

private func parseFails(_ line: String) -> Bool {
    parseFails(bytes(line))
}

@Test func blanksSeparateAndSurroundTokens() {
    #expect(tokens("GET 1") == [bytes("GET"), bytes("1")])
    #expect(tokens(" \t GET \t\t 1 \t ") == [bytes("GET"), bytes("1")])
    #expect(tokens("") == [])
    #expect(tokens(" \t  ") == [])
}

@Test func aBareTokenIsAnyRunOfNonBlankBytes() {
    #expect(tokens("ab\"c") == [bytes("ab\"c")])
    #expect(tokens("a\\n\"") == [bytes("a\\n\"")])
    #expect(tokens("a\u{1}b\u{7F}") == [[0x61, 0x01, 0x62, 0x7F]])
    #expect(tokens("小明 ok") == [bytes("小明"), bytes("ok")])
}

@Test func quotedTokens() {
    #expect(tokens("\"\"") == [[]])
    #expect(tokens("\"\" \"\"") == [[], []])
    #expect(tokens("\"Fran Li\" x") == [bytes("Fran Li"), bytes("x")])
    #expect(tokens("\"a\tb\"") == nil, "a raw tab is a control byte")
    #expect(tokens("\"a\"\tb") == [bytes("a"), bytes("b")])
    #expect(tokens("\"'\" \"\u{7F}\"") == [bytes("'"), [0x7F]])
}

@Test func everyEscape() {
    #expect(tokens(#""\"\\\n\r\t""#) == [[0x22, 0x5C, 0x0A, 0x0D, 0x09]])
    #expect(tokens(#""\x41\x7f\x7F\x0a\x01""#) == [[0x41, 0x7F, 0x7F, 0x0A, 0x01]])
    #expect(tokens(#""\xc3\xa9\xE6\x98\x8E""#) == [bytes("é明")])
    #expect(tokens(#""a\x20b""#) == [bytes("a b")])
}

@Test func badEscapesAreParseErrors() {
    for escape in [#"\a"#, #"\'"#, #"\0"#, #"\u0041"#, #"\N"#, #"\X41"#, #"\x4"#, #"\x4g"#, #"\xg4"#, #"\x"#, #"\ "#] {
        #expect(parseFails("\"" + escape + "\""), "\(escape)")
    }
    #expect(parseFails(#""\x4"#))
}

@Test func aMissingClosingQuoteIsAParseError() {
    #expect(parseFails("\""))
    #expect(parseFails("GET \"abc"))
    #expect(parseFails(#"GET "abc\""#))
    #expect(parseFails(#"GET "abc\"#))
}

@Test func theClosingQuoteMustBeFollowedByABlankOrTheEnd() {
    #expect(parseFails("\"a\"b"))
    #expect(parseFails("\"a\"\"b\""))
    #expect(parseFails("GET \"1\"x"))
    #expect(tokens("\"a\" b") == [bytes("a"), bytes("b")])
    #expect(tokens("\"a\"") == [bytes("a")])
}

@Test func everyRawControlByteInsideQuotesIsAParseError() {
    for byte in UInt8(0)..<0x20 {
        #expect(parseFails([0x22, 0x61, byte, 0x62, 0x22]), "byte \(byte)")
    }
}

@Test func aCRAnywhereIsAParseError() {
    for line in ["GET\r 1", "GET \r1", "GET 1\r", "\rGET 1", "GET \r", "GET \"1\"\r", "GET \"1\r\"", "GET 1 \r "] {
        #expect(parseFails(line), "\(line.debugDescription)")
    }
    #expect(tokens(#""\r""#) == [[0x0D]], "an escaped CR is fine")
}

@Test func anLFInsideTheContentIsAParseError() {
    #expect(parseFails("GET 1\nGET 2"))
    #expect(parseFails("GET \"1\n\""))
}

@Test func nulIsAParseErrorBareQuotedOrEscaped() {
    #expect(parseFails([0x61, 0x00]))
    #expect(parseFails([0x00]))
    #expect(parseFails([0x22, 0x00, 0x22]))
    #expect(parseFails(#""a\x00""#))
    #expect(tokens(#""a\x01""#) == [[0x61, 0x01]])
}

@Test func quotedTokensAreUnescapedInPlace() {
    var line = bytes(#"SET "a\"b" "x\x41y" z"#)
    let decoder = RequestDecoder()
    let arguments = line.withUnsafeMutableBytes { raw -> [[UInt8]]? in
        guard case .request(.set) = decoder.decode(raw) else {
            return nil
        }
        for i in 0..<decoder.argumentCount {
            // Every argument lies inside the caller's buffer.
            let argument = decoder.argument(i)
            #expect(argument.baseAddress! >= UnsafeRawPointer(raw.baseAddress!))
            #expect(argument.baseAddress! + argument.count <= UnsafeRawPointer(raw.baseAddress! + raw.count))
        }
        return (0..<decoder.argumentCount).map { Array(decoder.argument($0)) }
    }
    #expect(arguments == [bytes("a\"b"), bytes("xAy"), bytes("z")])
}

@Test func theLineTokenizerAgreesWithTheDecoder() throws {
    let line = bytes(#"  SET "a b"  c\d "\x41\t"  "#)
    #expect(decode(line) == .set(bytes("a b"), bytes(#"c\d"#), [0x41, 0x09]))
    #expect(try tokenize(line).get() == [bytes("SET"), bytes("a b"), bytes(#"c\d"#), [0x41, 0x09]])
}

@Test func longBareTokensEndOrFailAtEveryOffset() {
    for offset in 1..<23 {
        var token = repeated("a", 24)
        token[offset] = 0x20
        #expect(tokens(String(decoding: token, as: UTF8.self)) == [repeated("a", offset), repeated("a", 23 - offset)], "blank at \(offset)")
        for bad: UInt8 in [0x0D, 0x0A, 0x00] {
            token[offset] = bad
            #expect(parseFails(token), "byte \(bad) at \(offset)")
        }
        token[offset] = 0x01
        #expect(!parseFails(token), "control byte at \(offset)")
    }
}

// MARK: UTF-8

/// Each sequence is checked bare, quoted raw, and quoted with every byte escaped.
private func acceptsUTF8(_ sequence: [UInt8]) -> Bool? {
    let bare = tokenize([0x61] + sequence + [0x7A])
    let quoted = tokenize([0x22] + sequence + [0x22])
    let escaped = tokenize([0x22] + sequence.flatMap { Array("\\x\(String($0, radix: 16))".utf8) } + [0x22])
    let outcomes = [bare, quoted, escaped].map { result -> Bool in
        if case .success = result { true } else { false }
    }
    return outcomes.allSatisfy { $0 == outcomes[0] } ? outcomes[0] : nil
}

@Test func validUTF8AtEveryLengthBoundary() {
    let valid: [[UInt8]] = [
        [0x7F], [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80],
        [0xEF, 0xBF, 0xBF], [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF], [0xF3, 0xBF, 0xBF, 0xBF],
    ]
    for sequence in valid {
        #expect(acceptsUTF8(sequence) == true, "\(sequence)")
    }
}

@Test func invalidUTF8IsAParseError() {
    let invalid: [[UInt8]] = [
        [0x80], [0xBF], [0xC0, 0x80], [0xC1, 0xBF],  // continuation alone; overlong 2-byte
        [0xE0, 0x80, 0x80], [0xE0, 0x9F, 0xBF],  // overlong 3-byte
        [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF],  // surrogates
        [0xF0, 0x80, 0x80, 0x80], [0xF0, 0x8F, 0xBF, 0xBF],  // overlong 4-byte
        [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xFF],  // above U+10FFFF
        [0xC3], [0xE6, 0x98], [0xF0, 0x9F, 0x98],  // truncated
        [0xC3, 0x41], [0xE6, 0x41, 0x8E], [0xF0, 0x9F, 0x41, 0x80],  // interrupted
    ]
    for sequence in invalid {
        #expect(acceptsUTF8(sequence) == false, "\(sequence)")
    }
}

@Test func invalidBytesAreFoundAtEveryOffsetOfALongASCIIRun() {
    for offset in 0..<24 {
        var token = repeated("a", 24)
        token[offset] = 0xFF
        #expect(parseFails(token), "offset \(offset)")
        token[offset] = 0xC3
        #expect(parseFails(token), "truncated at offset \(offset)")
        token.insert(0xA9, at: offset + 1)
        #expect(!parseFails(token), "valid é at offset \(offset)")
    }
}

/// The validator against the standard library's, over every two-byte sequence
/// and every second byte of three- and four-byte ones.
@Test func theValidatorAgreesWithTheStandardLibrary() {
    func agree(_ sequence: [UInt8]) -> Bool {
        let ours = sequence.withUnsafeBytes { isValidUTF8($0.baseAddress!, count: $0.count) }
        return ours == (String(validating: sequence, as: UTF8.self) != nil)
    }
    var disagreements: [[UInt8]] = []
    for first in UInt8.min...UInt8.max {
        for second in UInt8.min...UInt8.max {
            for sequence in [[first, second], [first, second, 0x80], [first, second, 0xBF, 0x80], [first, second, 0x80, 0x41]]
            where !agree(sequence) {
                disagreements.append(sequence)
            }
        }
    }
    #expect(disagreements.isEmpty)
}
