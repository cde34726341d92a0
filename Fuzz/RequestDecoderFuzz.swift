// libFuzzer entry point over the request path's pure half: framing, decoding, argument checks,
// and the encoders whose output must decode back to what went in. Built by Scripts/fuzz with
// swiftc straight from Sources/ProfileProtocol (no SwiftPM), compiled into one module with
// them, so it checks the shipped code and uses only what clients can (the public API).
//
// Each property is a `check`, which traps with a message: libFuzzer saves the input that broke
// it, and the input becomes a regression case in Tests/FuzzCorpus.

import Glibc

/// Shorter than the server's 65,536 so TOOLONG is in reach, yet long enough for every value
/// limit and for more tokens than the decoder stores (3,001).
private let maxLine = 8192

private let decoder = RequestDecoder()
private let redecoder = RequestDecoder()
private let scratch = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    var input = Array(UnsafeBufferPointer(start: data, count: size))
    input.withUnsafeMutableBytes { frameEveryLine($0) }
    return 0
}

private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition {
        fputs("property broken: \(message())\n", stderr)
        abort()
    }
}

/// Frames lines off the front as the server does, and serves each.
private func frameEveryLine(_ buffer: UnsafeMutableRawBufferPointer) {
    var offset = 0
    while offset < buffer.count {
        let rest = UnsafeMutableRawBufferPointer(rebasing: buffer[offset...])
        switch LineFramer.nextLine(in: UnsafeRawBufferPointer(rest), maxLine: maxLine) {
        case .needMore:
            check(rest.count <= maxLine && !rest.contains(0x0A), "needMore with \(rest.count) bytes or an LF in them")
            return
        case .tooLong:
            check(!rest.prefix(maxLine).contains(0x0A) && rest.count > maxLine, "tooLong with \(rest.count) bytes or an LF inside the limit")
            return
        case .line(let contentCount, let consumed):
            check(consumed <= min(rest.count, maxLine), "consumed \(consumed) of \(rest.count)")
            check(rest[consumed - 1] == 0x0A, "a line that does not end at an LF")
            check(!rest.prefix(consumed - 1).contains(0x0A), "an LF before the line's end")
            let droppedCR = consumed - 1 - contentCount
            check(droppedCR == 0 || (droppedCR == 1 && rest[consumed - 2] == 0x0D), "content \(contentCount) of \(consumed)")
            check(droppedCR == 1 || contentCount == 0 || rest[contentCount - 1] != 0x0D, "a CR before the LF was kept")
            let line = Array(rest.prefix(contentCount))
            serve(UnsafeMutableRawBufferPointer(rebasing: rest[..<contentCount]), original: line)
            offset += consumed
        }
    }
}

/// Decodes one line and checks what came out against an independent reading of it.
private func serve(_ line: UnsafeMutableRawBufferPointer, original: [UInt8]) {
    let tokens: [[UInt8]]?
    do { tokens = try LineTokenizer.tokens(of: original) } catch { tokens = nil }
    // Read before decoding, which unescapes in place.
    let plainGet = RequestLines.plainGetUserId(UnsafeRawBufferPointer(line)).map { Array($0) }
    defer { checkPlainGet(plainGet, original: original) }
    switch decoder.decode(line) {
    case .empty:
        check(tokens == [], "empty, but the tokenizer found \(tokens.map { "\($0.count)" } ?? "an error")")
    case .error(let error):
        check(error.code == .parse || error.code == .unknown, "decode gave \(error.code)")
        check((error.code == .parse) == (tokens == nil), "decode and the tokenizer disagree on PARSE")
        checkErrorReply(error)
    case .request(let verb):
        guard let tokens else { return check(false, "decoded, but the tokenizer found an error") }
        check(decoder.argumentCount == tokens.count - 1, "\(decoder.argumentCount) arguments, \(tokens.count) tokens")
        for (i, token) in tokens.dropFirst().prefix(3000).enumerated() {
            check(Array(decoder.argument(i)) == token, "argument \(i) differs from the tokenizer's")
        }
        for token in tokens { check(isValidText(token), "a token that is not UTF-8 without NUL") }
        switch decoder.command() {
        case .failure(let error):
            check(error.code == .args || error.code == .tooLarge, "command gave \(error.code)")
            checkErrorReply(error)
        case .success(let command):
            checkLimits(command)
            reencode(verb: verb, tokens: tokens, command: command)
        }
    }
}

/// The server's shortcut for plain GETs (`plainGetUserId`) agrees with decoding: what it
/// takes is a GET of those bytes, and it takes every GET written as the verb, one space and
/// a bare ASCII id.
private func checkPlainGet(_ plain: [UInt8]?, original: [UInt8]) {
    var decoded: [UInt8]?
    var copy = original
    copy.withUnsafeMutableBytes { line in
        guard case .request(.get) = redecoder.decode(line), case .success(.get(let id)) = redecoder.command() else { return }
        decoded = Array(id)
    }
    if let plain {
        check(decoded == plain, "plainGetUserId took a line that is not a GET of those bytes")
    } else if let decoded, original.count == 4 + decoded.count, original[3] == 0x20,
              decoded.first != 0x22, decoded.allSatisfy({ (0x21...0x7F).contains($0) }) {
        check(false, "plainGetUserId passed over a plain GET")
    }
}

/// A valid command's limits hold, and its VALUE line decodes back to its values.
private func checkLimits(_ command: Command) {
    switch command {
    case .get(let id), .exists(let id), .del(let id):
        check(id.count >= 1 && id.count <= Limits.userId, "userId of \(id.count) bytes accepted")
    case .mget(let count):
        check(count >= 1 && count <= Limits.maxIds, "MGET of \(count)")
    case .mset(let triples):
        check(triples >= 1 && triples <= Limits.maxTriples, "MSET of \(triples)")
    case .recent(let limit), .scan(_, let limit):
        check(limit >= 1 && limit <= Limits.maxCount, "a count of \(limit)")
    case .set(let userId, let name, let portraitUri):
        check(userId.count >= 1 && userId.count <= Limits.userId && name.count <= Limits.name
              && portraitUri.count <= Limits.portraitUri, "SET over a limit accepted")
        let count = ReplyEncoder.writeValueLine(userId: userId, name: name, portraitUri: portraitUri, to: scratch)
        let reply = Array(UnsafeRawBufferPointer(start: scratch, count: count))
        check(reply.last == 0x0A && !reply.dropLast().contains(0x0A), "a VALUE line that is not one line")
        let back = try? LineTokenizer.tokens(of: reply.dropLast())
        check(back == [Array("VALUE".utf8), Array(userId), Array(name), Array(portraitUri)], "a VALUE line that reads back otherwise")
    case .update(let userId, let name, let portraitUri):
        check(userId.count >= 1 && userId.count <= Limits.userId, "UPDATE of a bad userId accepted")
        check(name != nil || portraitUri != nil, "UPDATE with no field")
    default:
        break
    }
}

/// Writes the tokens back with ValueEncoder, decodes that line, and expects the same command.
private func reencode(verb: Verb, tokens: [[UInt8]], command: Command) {
    var line = tokens[0]
    for token in tokens.dropFirst() {
        line.append(0x20)
        ValueEncoder.append(token, to: &line)
    }
    line.withUnsafeMutableBytes { raw in
        guard case .request(let again) = redecoder.decode(raw) else {
            return check(false, "a re-encoded line no longer decodes")
        }
        check(again == verb, "the verb changed")
        check(redecoder.argumentCount == tokens.count - 1, "the argument count changed")
        for i in 0..<min(redecoder.argumentCount, 3000) {
            check(Array(redecoder.argument(i)) == tokens[i + 1], "argument \(i) changed on the round trip")
        }
        guard case .success = redecoder.command() else { return check(false, "a re-encoded command is refused") }
    }
}

/// An error reply is one line of printable ASCII and UTF-8, whatever the input held.
private func checkErrorReply(_ error: ProtocolError) {
    var reply: [UInt8] = []
    error.appendReply(to: &reply)
    check(reply.count == error.replyCount, "replyCount \(error.replyCount) for \(reply.count) bytes")
    check(reply.last == 0x0A && !reply.dropLast().contains { $0 < 0x20 || $0 == 0x7F }, "an error reply with control bytes")
    check(isValidText(reply), "an error reply that is not UTF-8")
}

private func isValidText(_ bytes: [UInt8]) -> Bool {
    !bytes.contains(0) && String(validating: bytes, as: UTF8.self) != nil
}
