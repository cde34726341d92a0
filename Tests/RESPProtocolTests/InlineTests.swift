@testable import RESPProtocol
import Testing

@Test func anInlineRequestIsALineSplitOnBlanks() {
    #expect(events("PING\r\n") == [request("PING")])
    #expect(events("PING\n") == [request("PING")])
    #expect(events("  HGET  k:1 \t name \r\n") == [request("HGET", "k:1", "name")])
    #expect(events("HGET k name\r\nPING\nQUIT\r\n") == [request("HGET", "k", "name"), request("PING"), request("QUIT")])
    // A CR before the LF goes; any other CR is a blank, as is VT or FF before an argument.
    #expect(events("PING\r\r\n") == [request("PING")])
    #expect(events("GET a\rb\r\n") == [request("GET", "a", "b")])
    #expect(events("\u{0B}\u{0C}PING \u{0B}x\r\n") == [request("PING", "x")])
    // Inside a bare argument VT and FF are ordinary bytes: only space, tab, CR and LF end it.
    #expect(events("PI\u{0B}NG a\u{0C}b\r\n") == [request("PI\u{0B}NG", "a\u{0C}b")])
    // Backslashes are ordinary outside quotes.
    #expect(events(#"ECHO a\nb\"# + "\n") == [request("ECHO", #"a\nb\"#)])
    // A line that starts with anything but `*` is inline, `$` too.
    #expect(events("$4\r\n") == [request("$4")])
}

@Test func aBlankLineIsSkipped() {
    #expect(events("\r\n\n   \r\n \t \u{0B}\n*1\r\n$4\r\nPING\r\n") == [.skipped, .skipped, .skipped, .skipped, request("PING")])
}

@Test func doubleQuotesTakeRedisEscapes() {
    #expect(events(#"SET "a b" "c\"d""# + "\r\n") == [request("SET", "a b", "c\"d")])
    #expect(events(#"ECHO "\n\r\t\b\a\\\"""# + "\r\n") == [.request([bytes("ECHO"), [0x0A, 0x0D, 0x09, 0x08, 0x07, 0x5C, 0x22]])])
    #expect(events(#"ECHO "\x41\x6a\xFF\x00""# + "\r\n") == [.request([bytes("ECHO"), [0x41, 0x6A, 0xFF, 0x00]])])
    // A backslash before any other byte stands for that byte; so does `\x` without two hex digits.
    #expect(events(#"ECHO "\q\x4g\x\'""# + "\n") == [request("ECHO", "qx4gx'")])
    #expect(events(#"ECHO "\x4""# + "\n") == [request("ECHO", "x4")])
    // Raw bytes inside quotes are kept, a blank or a single quote too.
    #expect(events("ECHO \"a\tb 'c'\u{1}\"\n") == [request("ECHO", "a\tb 'c'\u{1}")])
}

@Test func singleQuotesTakeOnlyTheEscapedQuote() {
    #expect(events(#"ECHO 'a b' 'it\'s' 'a\nb' 'a\b' '"'"# + "\n") == [request("ECHO", "a b", "it's", #"a\nb"#, #"a\b"#, "\"")])
    // A backslash escapes only a quote, so `'\\'` does not close where it seems to.
    #expect(events(#"ECHO '\\' 'x'"# + "\n") == [.error(.unbalancedQuotes)])
}

@Test func aQuoteInsideAnArgumentStartsAQuotedPart() {
    #expect(events(#"ECHO a"b c" x'y z'"# + "\n") == [request("ECHO", "ab c", "xy z")])
    #expect(events(#"ECHO "" '' """# + "\n") == [request("ECHO", "", "", "")])
    // A closing quote may be followed by any blank.
    #expect(events("ECHO \"a\"\u{0B}'b'\u{0C}\"c\"\r\"d\"\r\n") == [request("ECHO", "a", "b", "c", "d")])
}

@Test func unbalancedQuotesEndTheConnection() {
    for line in [#"ECHO "abc"#, #"ECHO 'abc"#, #"ECHO "abc\""#, #"ECHO "abc\"#, #"ECHO "a"b"#, #"ECHO 'a'b"#,
                 #"ECHO "a"'b'"#, "ECHO \"a\"\"", #"ECHO a"b"c"#, #"ECHO 'it\'"#, #"""#] {
        #expect(events(line + "\r\nPING\r\n") == [.error(.unbalancedQuotes)], "\(line)")
    }
    // Redis's own test.
    #expect(events("set \"\"\"test-key\"\"\" test-value\r\nping\r\n") == [.error(.unbalancedQuotes)])
    // The CR before the LF is not part of the line: it cannot end a quoted part.
    #expect(events("ECHO \"a\r\n") == [.error(.unbalancedQuotes)])
}

@Test func quotedArgumentsAreUnescapedWithoutChangingTheInput() {
    let input = bytes(#"ECHO "a\x42c" plain"# + "\n")
    let copy = input
    input.withUnsafeBytes { raw in
        let decoder = RESPDecoder()
        var state = RESPDecodeState()
        #expect(decoder.decode(raw, state: &state, authenticated: true) == .request(consumed: raw.count))
        #expect(decoder.arguments.map { Array($0) } == [bytes("ECHO"), bytes("aBc"), bytes("plain")])
        let inside = { (argument: UnsafeRawBufferPointer) in
            raw.baseAddress! <= argument.baseAddress! && argument.baseAddress! + argument.count <= raw.baseAddress! + raw.count
        }
        #expect(inside(decoder.arguments[0]) && inside(decoder.arguments[2]), "bare arguments are views")
        #expect(!inside(decoder.arguments[1]), "a quoted argument is unescaped elsewhere")
    }
    #expect(input == copy)
}

/// Redis finds the LF with strchr, which stops at a NUL: an inline request with a NUL before
/// its LF never ends, and is too big once more than the limit has arrived. Redis's "protocol
/// desync" tests send `\0` and `$\0` this way and expect a protocol error.
@Test func aNULBeforeTheLFMakesAnInlineRequestTooBigOnceTheLimitHasArrived() {
    let limits = RESPLimits(maxInlineBytes: 16)
    for start: [UInt8] in [[0x00], [0x24, 0x00], bytes("PING\0")] {
        let input = start + bytes("\r\n") + repeated("A", 20) + bytes("\n")
        #expect(events(input, limits: limits) == [.error(.tooBigInlineRequest)], "\(start)")
        #expect(decodeStream(Array(input.prefix(16)), limits: limits) == Decoded(events: [], pending: 16))
    }
}
