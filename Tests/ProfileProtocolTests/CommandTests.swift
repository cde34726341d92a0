import ProfileProtocol
import Testing

/// A request line: the verb, then each argument encoded as a token.
private func request(_ verb: String, _ arguments: [[UInt8]]) -> [UInt8] {
    var line = bytes(verb)
    for argument in arguments {
        line.append(0x20)
        ValueEncoder.append(argument, to: &line)
    }
    return line
}

private func ids(_ count: Int) -> [[UInt8]] {
    (0..<count).map { bytes("u\($0)") }
}

private func triples(_ count: Int) -> [[UInt8]] {
    (0..<count).flatMap { [bytes("u\($0)"), bytes("n\($0)"), bytes("p\($0)")] }
}

private let id128 = repeated("i", 128), id129 = repeated("i", 129)
private let name256 = repeated("n", 256), name257 = repeated("n", 257)
private let uri2048 = repeated("p", 2048), uri2049 = repeated("p", 2049)

@Test func blankLinesAreEmpty() {
    #expect(decode("") == .empty)
    #expect(decode("   ") == .empty)
    #expect(decode(" \t \t") == .empty)
}

@Test func commandsWithoutArguments() {
    let expected: [(String, Decoded)] = [("PING", .ping), ("count", .count), ("Stats", .stats), ("FLUSHALL", .flushall), ("quit", .quit)]
    for (verb, command) in expected {
        #expect(decode(verb) == command)
        #expect(decode(" \(verb) ") == command)
        #expect(decode("\(verb) x").code == .args, "\(verb)")
        #expect(decode("\(verb) \"\"").code == .args, "\(verb)")
    }
    #expect(decode("PING 1").reply == "ERROR ARGS usage: PING")
}

@Test func singleIdCommands() {
    let make: [String: ([UInt8]) -> Decoded] = ["GET": { .get($0) }, "EXISTS": { .exists($0) }, "DEL": { .del($0) }]
    for (verb, command) in make {
        #expect(decode(request(verb, [bytes("42")])) == command(bytes("42")))
        #expect(decode(request(verb, [id128])) == command(id128))
        #expect(decode(request(verb, [id129])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
        #expect(decode(request(verb, [])).code == .args, "\(verb)")
        #expect(decode(request(verb, [bytes("1"), bytes("2")])).code == .args, "\(verb)")
        #expect(decode(request(verb, [[]])).reply == "ERROR ARGS empty userId")
        #expect(decode(request(verb, [id129, bytes("2")])).code == .args, "ARGS before TOOLARGE for \(verb)")
    }
    #expect(decode("GET").reply == "ERROR ARGS usage: GET <userId>")
}

@Test func limitsApplyAfterUnescaping() {
    let escaped128 = "\"" + String(repeating: #"\x41"#, count: 128) + "\""
    let escaped129 = "\"" + String(repeating: #"\x41"#, count: 129) + "\""
    #expect(decode("GET " + escaped128) == .get(repeated("A", 128)))
    #expect(decode("GET " + escaped129).code == .tooLarge)
    let multibyte = String(repeating: "é", count: 64)  // 128 bytes
    #expect(decode("GET " + multibyte) == .get(bytes(multibyte)))
    #expect(decode("GET " + multibyte + "x").code == .tooLarge)
}

@Test func mgetTakesOneToAThousandIds() {
    #expect(decode(request("MGET", [bytes("7")])) == .mget([bytes("7")]))
    #expect(decode(request("MGET", [bytes("7"), bytes("7")])) == .mget([bytes("7"), bytes("7")]))
    #expect(decode(request("MGET", ids(1000))) == .mget(ids(1000)))
    #expect(decode(request("MGET", ids(1001))).reply == "ERROR TOOLARGE count exceeds 1000 ids")
    #expect(decode(request("MGET", ids(5000))).code == .tooLarge)
    #expect(decode(request("MGET", [])).reply == "ERROR ARGS usage: MGET <userId> [<userId> ...]")
    #expect(decode(request("MGET", [id128, id128])) == .mget([id128, id128]))
    #expect(decode(request("MGET", [bytes("1"), id129])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
}

@Test func mgetReportsAnEmptyIdBeforeAnyTooLarge() {
    #expect(decode(request("MGET", [[], repeated("i", 200)])).code == .args)
    #expect(decode(request("MGET", [repeated("i", 200), []])).code == .args)
    #expect(decode(request("MGET", ids(1000) + [[]])).code == .args, "empty id and too many ids")
    // Beyond the decoder's stored tokens, empty ids are still seen, at every position modulo 3.
    for extra in 0..<3 {
        #expect(decode(request("MGET", ids(3000 + extra) + [[]] + ids(2))).code == .args, "extra \(extra)")
    }
    #expect(decode(request("MGET", ids(3003))).code == .tooLarge)
}

@Test func setChecksEachFieldAtItsLimit() {
    #expect(decode(#"SET 42 "Fran Li" https://cdn.example/p/42.png"#)
        == .set(bytes("42"), bytes("Fran Li"), bytes("https://cdn.example/p/42.png")))
    #expect(decode(request("SET", [bytes("1"), [], []])) == .set(bytes("1"), [], []))
    #expect(decode(request("SET", [id128, name256, uri2048])) == .set(id128, name256, uri2048))
    #expect(decode(request("SET", [id129, name256, uri2048])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
    #expect(decode(request("SET", [id128, name257, uri2048])).reply == "ERROR TOOLARGE name exceeds 256 bytes")
    #expect(decode(request("SET", [id128, name256, uri2049])).reply == "ERROR TOOLARGE portraitUri exceeds 2048 bytes")
    #expect(decode(request("SET", [id129, name257, uri2049])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
    #expect(decode(request("SET", [id128, name257, uri2049])).reply == "ERROR TOOLARGE name exceeds 256 bytes")
    #expect(decode(request("SET", [[], name257, uri2049])).reply == "ERROR ARGS empty userId")
    #expect(decode(request("SET", [bytes("1"), bytes("n")])).reply == "ERROR ARGS usage: SET <userId> <name> <portraitUri>")
    #expect(decode(request("SET", [id129, bytes("n"), bytes("p"), bytes("x")])).code == .args)
}

@Test func msetTakesOneToAThousandTriples() {
    #expect(decode(request("MSET", triples(1))) == .mset(triples(1)))
    #expect(decode(request("MSET", triples(1000))) == .mset(triples(1000)))
    #expect(decode(request("MSET", triples(1001))).reply == "ERROR TOOLARGE count exceeds 1000 triples")
    #expect(decode(request("MSET", triples(1) + [id128, name256, uri2048])) == .mset(triples(1) + [id128, name256, uri2048]))
    for count in [0, 1, 2, 4, 5, 3001, 3002] {
        #expect(decode(request("MSET", Array(triples(1001).prefix(count)))).code == .args, "\(count) arguments")
    }
}

@Test func msetChecksEveryTriple() {
    #expect(decode(request("MSET", triples(1) + [[], [], []])).reply == "ERROR ARGS empty userId")
    #expect(decode(request("MSET", triples(1) + [bytes("x"), [], []])) == .mset(triples(1) + [bytes("x"), [], []]))
    #expect(decode(request("MSET", triples(1) + [id129, bytes("n"), bytes("p")])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
    #expect(decode(request("MSET", triples(1) + [bytes("x"), name257, bytes("p")])).reply == "ERROR TOOLARGE name exceeds 256 bytes")
    #expect(decode(request("MSET", triples(1) + [bytes("x"), bytes("n"), uri2049])).reply == "ERROR TOOLARGE portraitUri exceeds 2048 bytes")
    // ARGS anywhere outranks TOOLARGE anywhere.
    #expect(decode(request("MSET", [id129, bytes("n"), bytes("p"), [], bytes("n"), bytes("p")])).code == .args)
    // Too many triples, and an empty userId in the 1001st, which the decoder does not store.
    #expect(decode(request("MSET", triples(1000) + [[], bytes("n"), bytes("p")])).code == .args)
    // An empty name or portraitUri there is fine: the count is the fault.
    #expect(decode(request("MSET", triples(1000) + [bytes("x"), [], []])).code == .tooLarge)
}

@Test func updateTakesOneOrTwoFields() {
    #expect(decode("UPDATE 42 name 小明") == .update(bytes("42"), name: bytes("小明"), portraitUri: nil))
    #expect(decode("UPDATE 42 portraitUri u") == .update(bytes("42"), name: nil, portraitUri: bytes("u")))
    #expect(decode("UPDATE 42 portraitUri u name n") == .update(bytes("42"), name: bytes("n"), portraitUri: bytes("u")))
    #expect(decode(#"UPDATE 42 name "" portraitUri """#) == .update(bytes("42"), name: [], portraitUri: []))
    for bad in ["UPDATE", "UPDATE 42", "UPDATE 42 name", "UPDATE 42 name n portraitUri", "UPDATE 42 name n portraitUri u x"] {
        #expect(decode(bad).reply == "ERROR ARGS usage: UPDATE <userId> <field> <value> [<field> <value>]", "\(bad)")
    }
}

@Test func updateFieldsAreCaseSensitiveAndUnrepeated() {
    for bad in ["Name n", "portraituri u", "NAME n", "uri u", "name n name m", "portraitUri u portraitUri v", "name n Name m", "\"\" n"] {
        #expect(decode("UPDATE 42 " + bad).reply == "ERROR ARGS fields are name and portraitUri, each at most once", "\(bad)")
    }
    #expect(decode(#"UPDATE "" name n"#).reply == "ERROR ARGS empty userId")
}

@Test func updateChecksEachValueAgainstItsFieldsLimit() {
    #expect(decode(request("UPDATE", [id128, bytes("name"), name256, bytes("portraitUri"), uri2048]))
        == .update(id128, name: name256, portraitUri: uri2048))
    #expect(decode(request("UPDATE", [id128, bytes("portraitUri"), name257])) == .update(id128, name: nil, portraitUri: name257))
    #expect(decode(request("UPDATE", [id129, bytes("name"), bytes("n")])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
    #expect(decode(request("UPDATE", [id128, bytes("name"), name257])).reply == "ERROR TOOLARGE name exceeds 256 bytes")
    #expect(decode(request("UPDATE", [id128, bytes("portraitUri"), uri2049])).reply == "ERROR TOOLARGE portraitUri exceeds 2048 bytes")
    // Both too large: the first in request order.
    #expect(decode(request("UPDATE", [id128, bytes("portraitUri"), uri2049, bytes("name"), name257])).reply
        == "ERROR TOOLARGE portraitUri exceeds 2048 bytes")
    #expect(decode(request("UPDATE", [id128, bytes("name"), name257, bytes("portraitUri"), uri2049])).reply
        == "ERROR TOOLARGE name exceeds 256 bytes")
    // ARGS outranks TOOLARGE.
    #expect(decode(request("UPDATE", [id129, bytes("nom"), bytes("n")])).code == .args)
    #expect(decode(request("UPDATE", [id128, bytes("name"), name257, bytes("name"), bytes("n")])).code == .args)
}

@Test func numbersAreOneToNineDigitsWithinOneToAThousand() {
    #expect(decode("RECENT") == .recent(20))
    #expect(decode("RECENT 1") == .recent(1))
    #expect(decode("RECENT 1000") == .recent(1000))
    #expect(decode("RECENT 000000005") == .recent(5), "nine digits")
    #expect(decode(#"RECENT "7""#) == .recent(7), "quoting does not matter")
    for bad in ["0", "1001", "0000000005", "999999999", "+5", "-5", "5a", "a", "\"\"", "1.0", "٣", "\" 5\""] {
        #expect(decode("RECENT " + bad).reply == "ERROR ARGS n must be a number from 1 to 1000", "\(bad)")
    }
    #expect(decode("RECENT 1 2").reply == "ERROR ARGS usage: RECENT [<n>]")
}

@Test func scanTakesAnAfterAndAnOptionalCount() {
    #expect(decode(#"SCAN """#) == .scan([], 100))
    #expect(decode("SCAN u9 5") == .scan(bytes("u9"), 5))
    #expect(decode(request("SCAN", [id128, bytes("1000")])) == .scan(id128, 1000))
    #expect(decode(request("SCAN", [id129])).reply == "ERROR TOOLARGE userId exceeds 128 bytes")
    #expect(decode(request("SCAN", [id129, bytes("0")])).code == .args, "ARGS before TOOLARGE")
    #expect(decode("SCAN u9 1001").code == .args)
    #expect(decode("SCAN").reply == "ERROR ARGS usage: SCAN <after> [<n>]")
    #expect(decode("SCAN a 1 2").code == .args)
}

@Test func authTakesExactlyOneToken() {
    #expect(decode("AUTH s3cret") == .auth(bytes("s3cret")))
    #expect(decode(#"AUTH """#) == .auth([]))
    #expect(decode("AUTH").reply == "ERROR ARGS usage: AUTH <token>")
    #expect(decode("AUTH a b").code == .args)
}

@Test func errorPrecedence() {
    // PARSE anywhere in the line comes before UNKNOWN and everything after it.
    #expect(decode(#"FROB "x"#).code == .parse)
    #expect(decode("FROB \u{1}\r").code == .parse)
    #expect(decode(request("MGET", ids(4000)) + bytes(#" "\q""#)).code == .parse, "past the stored tokens")
    // UNKNOWN before ARGS.
    #expect(decode(#"FROB "" "" """#).code == .unknown)
    // ARGS before TOOLARGE is covered per command; one more across fields:
    #expect(decode(request("MGET", [id129, [], id129])).code == .args)
}

@Test func theExampleSessionDecodes() {
    #expect(decode("PING") == .ping)
    #expect(decode("GET 42") == .get(bytes("42")))
    #expect(decode("MGET 42 7") == .mget([bytes("42"), bytes("7")]))
    #expect(decode("DEL 42") == .del(bytes("42")))
    #expect(decode("FROB").reply == "ERROR UNKNOWN unknown command 'FROB'")
}

@Test func aDecoderIsReusedLineAfterLine() {
    let decoder = RequestDecoder()
    #expect(decode(request("MSET", triples(1000)), with: decoder) == .mset(triples(1000)))
    #expect(decode(bytes("PING"), with: decoder) == .ping)
    #expect(decode(bytes("GET \"1"), with: decoder).code == .parse)
    #expect(decode(request("MGET", ids(3000) + [[]]), with: decoder).code == .args)
    #expect(decode(request("MGET", ids(1001)), with: decoder).code == .tooLarge, "no empty id remembered")
    #expect(decode(bytes("   "), with: decoder) == .empty)
    #expect(decode(bytes("GET 9"), with: decoder) == .get(bytes("9")))
}

@Test func plainGetsAreRecognizedWithoutDecoding() {
    func plain(_ line: [UInt8]) -> [UInt8]? {
        line.withUnsafeBytes { RequestLines.plainGetUserId($0).map { Array($0) } }
    }
    let taken: [[UInt8]] = [bytes("GET u1"), bytes("get 42"), bytes("gEt a\"b\\c"), bytes("GET ~!") + [0x7F],
                            bytes("GET ") + id128, bytes("GET 0123456789abcdefX")]
    for line in taken {
        #expect(plain(line) == Array(line.dropFirst(4)), "\(line)")
        #expect(decode(line) == .get(Array(line.dropFirst(4))), "\(line)")
    }
    // Each of these is decoded as usual: an error, another verb, or a GET of another form.
    let passed: [[UInt8]] = [bytes("GET"), bytes("GET "), bytes("GET  u1"), bytes("GET\tu1"), bytes("GET u1 "),
                             bytes("GET \"u1\""), bytes("GET u 1"), bytes("GETS u1"), bytes("SET u1"), bytes("FET u1"),
                             bytes("GET ") + id129, bytes("GET\0u1"), bytes("GET u\u{e9}"), bytes("GET u\r1"),
                             bytes("GET u") + [0x1F], bytes("MGET u1"), bytes(" GET u1")]
    for line in passed {
        #expect(plain(line) == nil, "\(line)")
    }
}
