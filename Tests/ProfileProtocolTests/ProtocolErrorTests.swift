import ProfileProtocol
import Testing

private func reply(_ error: ProtocolError) -> (bytes: [UInt8], exact: Bool) {
    written(count: error.replyCount) { error.write(to: $0) }
}

@Test func errorCodesAreNamedAsOnTheWire() {
    let names = ErrorCode.allCases.map { code in code.name.withUTF8Buffer { String(decoding: $0, as: UTF8.self) } }
    #expect(names == ["PARSE", "UNKNOWN", "ARGS", "TOOLARGE", "TOOLONG", "NOAUTH", "DENIED", "STORE", "BUSY"])
    for code in ErrorCode.allCases {
        #expect(ErrorCode(name: code.name.withUTF8Buffer { Array($0) }) == code)
    }
    #expect(ErrorCode(name: bytes("parse")) == nil)
    #expect(ErrorCode(name: bytes("ERROR")) == nil)
}

@Test func onlyTooLongAndBusyCloseTheConnection() {
    #expect(ErrorCode.allCases.filter(\.closesConnection) == [.tooLong, .busy])
}

@Test func errorRepliesAreWrittenExactly() {
    let fixed = reply(ProtocolError(.store, "the store failed"))
    #expect(fixed.exact)
    #expect(fixed.bytes == bytes("ERROR STORE the store failed\n"))
    for error in [ProtocolError.tooLong, .noAuth, .wrongToken, .roleDenied, .busy] {
        let written = reply(error)
        #expect(written.exact)
        #expect(written.bytes == bytes(error.description + "\n"))
    }
    #expect(ProtocolError.busy.description == "ERROR BUSY too many connections")
}

@Test func unknownErrorRepliesAreWrittenExactly() throws {
    for verb in ["FROB", "\"a b\"", "\"\\x01\"", String(repeating: "é", count: 20), String(repeating: "\"\\x7f\"", count: 1)] {
        var line = bytes(verb)
        let error = line.withUnsafeMutableBytes { raw -> ProtocolError? in
            if case .error(let error) = RequestDecoder().decode(raw) { error } else { nil }
        }
        guard let error else {
            Issue.record("\(verb) decoded")
            continue
        }
        let written = reply(error)
        #expect(written.exact, "\(verb)")
        var appended: [UInt8] = []
        error.appendReply(to: &appended)
        #expect(appended == written.bytes)
        #expect(try LineTokenizer.tokens(of: appended.dropLast()).prefix(4) == [bytes("ERROR"), bytes("UNKNOWN"), bytes("unknown"), bytes("command")])
    }
}

@Test func tooLargeMessagesStartWithTheFieldAndStateTheLimit() {
    let lines: [([UInt8], String)] = [
        (bytes("GET " + String(repeating: "i", count: Limits.userId + 1)), "userId exceeds \(Limits.userId) bytes"),
        (bytes("SET i " + String(repeating: "n", count: Limits.name + 1) + " p"), "name exceeds \(Limits.name) bytes"),
        (bytes("SET i n " + String(repeating: "p", count: Limits.portraitUri + 1)), "portraitUri exceeds \(Limits.portraitUri) bytes"),
        (bytes("MGET" + String(repeating: " i", count: Limits.maxIds + 1)), "count exceeds \(Limits.maxIds) ids"),
        (bytes("MSET" + String(repeating: " i n p", count: Limits.maxTriples + 1)), "count exceeds \(Limits.maxTriples) triples"),
    ]
    for (line, message) in lines {
        #expect(decode(line).reply == "ERROR TOOLARGE " + message)
    }
}
