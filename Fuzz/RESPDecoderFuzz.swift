// libFuzzer entry point over the RESP codec: the decoder, fed in one piece, split in two and a
// byte at a time, checked against an independent reading of Redis's rules, and the encoders
// whose output must decode back to what went in. Built by Scripts/fuzz with swiftc straight
// from Sources/RESPProtocol (no SwiftPM), compiled into one module with them, so it checks
// the shipped code and uses only what clients can (the public API).
//
// Each property is a `check`, which traps with a message: libFuzzer saves the input that broke
// it, and the input becomes a regression case in Tests/RESPFuzzCorpus.

import Glibc

/// Small limits, so that every error is within a short input's reach. An inline argument fits
/// in a bulk string and a request's payload, so every request can be sent again as a multibulk.
private let limits = RESPLimits(
    maxArguments: 8, maxBulkBytes: 64, maxInlineBytes: 64, maxRequestPayloadBytes: 160,
    unauthenticatedMaxArguments: 3, unauthenticatedMaxBulkBytes: 16)

private let decoder = RESPDecoder(limits: limits)
private let redecoder = RESPDecoder(limits: limits)
private let scratch = UnsafeMutableRawPointer.allocate(byteCount: 1 << 16, alignment: 16)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    for authenticated in [true, false] {
        let whole = decodeInOnePiece(input, authenticated: authenticated)
        check(whole == Reference(authenticated: authenticated).events(of: input), "the decoder and the reference disagree")
        check(decodeByteByByte(input, authenticated: authenticated) == whole, "fed a byte at a time, the stream decodes otherwise")
        check(decodeReadingAhead(input, authenticated: authenticated) == whole, "read ahead, the stream decodes otherwise")
        checkSplits(input, whole, authenticated: authenticated)
        for event in whole {
            switch event {
            case .request(let arguments, _):
                checkReencoding(arguments)
                checkCommandErrors(arguments)
            case .error(let error):
                checkErrorReply(error)
            case .skipped, .needMore:
                break
            }
        }
    }
    return 0
}

private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition {
        fputs("property broken: \(message())\n", stderr)
        abort()
    }
}

/// One outcome of decoding, with the arguments copied out.
private enum Event: Equatable {
    case request([[UInt8]], consumed: Int)
    case skipped(consumed: Int)
    case error(RESPProtocolError)
    /// The input ran out with these bytes unconsumed.
    case needMore(pending: Int)
}

/// Copies `bytes` into memory of exactly their size, so that AddressSanitizer catches any read
/// past the end of what the decoder was given.
private func withExactCopy<R>(_ bytes: ArraySlice<UInt8>, _ body: (UnsafeRawBufferPointer) -> R) -> R {
    let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
    defer { copy.deallocate() }
    copy.copyBytes(from: bytes)
    return body(UnsafeRawBufferPointer(copy))
}

/// Decodes the front of `input`, checking what every caller relies on.
private func decodeOne(_ input: UnsafeRawBufferPointer, state: inout RESPDecodeState, authenticated: Bool) -> Event? {
    let outcome = decoder.decode(input, state: &state, authenticated: authenticated)
    switch outcome {
    case .request(let consumed):
        check(consumed > 0 && consumed <= input.count, "consumed \(consumed) of \(input.count)")
        let arguments = decoder.arguments
        check(arguments.count >= 1 && arguments.count <= limits.maxArguments, "\(arguments.count) arguments")
        check(state == RESPDecodeState(), "the state was not reset after a request")
        return .request(arguments.map { Array($0) }, consumed: consumed)
    case .skipped(let consumed):
        check(consumed > 0 && consumed <= input.count, "skipped \(consumed) of \(input.count)")
        check(decoder.arguments.isEmpty, "arguments after a skip")
        return .skipped(consumed: consumed)
    case .error(let error):
        return .error(error)
    case .needMore:
        check(decoder.arguments.isEmpty, "arguments while waiting")
        check(input.count < limits.receiveBufferBytes, "waiting with \(input.count) bytes buffered")
        return nil
    }
}

/// Decodes up to `count` events of `buffer` from `offset` into `events`, and returns where
/// they end; nil once the stream has ended (an error, or the input ran out: `.needMore`).
private func decodeEvents(_ buffer: UnsafeRawBufferPointer, from offset: Int, count: Int, authenticated: Bool,
                          into events: inout [Event]) -> Int? {
    var offset = offset
    for _ in 0..<count {
        var state = RESPDecodeState()
        let rest = UnsafeRawBufferPointer(rebasing: buffer[offset...])
        guard let event = decodeOne(rest, state: &state, authenticated: authenticated) else {
            events.append(.needMore(pending: rest.count))
            return nil
        }
        events.append(event)
        switch event {
        case .request(_, let consumed), .skipped(let consumed): offset += consumed
        case .error, .needMore: return nil
        }
    }
    return offset
}

private func decodeInOnePiece(_ input: [UInt8], authenticated: Bool) -> [Event] {
    withExactCopy(input[...]) { buffer in
        var events: [Event] = []
        var offset = 0
        while let next = decodeEvents(buffer, from: offset, count: 1, authenticated: authenticated, into: &events) {
            offset = next
        }
        return events
    }
}

/// What a connection sees when each pass first reads ahead (`decodeAhead`) up to a
/// pseudo-random number of requests, and the decoder then hands them out: a pass ends before
/// the last third of them, as one that stops at a write in flight does, and the next reads
/// ahead again from where it stopped.
private func decodeReadingAhead(_ input: [UInt8], authenticated: Bool) -> [Event] {
    withExactCopy(input[...]) { buffer in
        var events: [Event] = []
        var offset = 0
        var limit = 2 + input.count % 5
        while true {
            let rest = UnsafeRawBufferPointer(rebasing: buffer[offset...])
            let read = decoder.decodeAhead(rest, limit: limit, authenticated: authenticated)
            check(read <= limit, "read \(read) requests ahead for a limit of \(limit)")
            guard let next = decodeEvents(buffer, from: offset, count: max(1, read - read / 3), authenticated: authenticated,
                                          into: &events) else { return events }
            offset = next
            limit = (limit + 3) % 7
        }
    }
}

/// What a connection sees when every byte arrives on its own.
private func decodeByteByByte(_ input: [UInt8], authenticated: Bool) -> [Event] {
    withExactCopy(input[...]) { buffer in
        var events: [Event] = []
        var state = RESPDecodeState()
        var start = 0
        for end in 0...buffer.count {
            while true {
                let arrived = UnsafeRawBufferPointer(rebasing: buffer[start..<end])
                guard let event = decodeOne(arrived, state: &state, authenticated: authenticated) else { break }
                events.append(event)
                switch event {
                case .request(_, let consumed), .skipped(let consumed): start += consumed
                case .error, .needMore: return events
                }
            }
        }
        events.append(.needMore(pending: buffer.count - start))
        return events
    }
}

/// Each event decoded in one piece decodes the same when its bytes arrive in two reads split at
/// a pseudo-random point, each read a fresh buffer, the state carried from the first to the
/// second. A read holds at most `receiveBufferBytes`, which must be enough to decide.
private func checkSplits(_ input: [UInt8], _ whole: [Event], authenticated: Bool) {
    var start = 0
    var random = UInt64(truncatingIfNeeded: input.count) &* 0x9E37_79B9_7F4A_7C15 | 1
    for b in input.prefix(64) {
        random = (random ^ UInt64(b)) &* 0x100_0000_01B3
    }
    for event in whole {
        let available = min(input.count - start, limits.receiveBufferBytes)
        random = random &* 6364136223846793005 &+ 1442695040888963407
        let split = Int((random >> 33) % UInt64(available + 1))
        var state = RESPDecodeState()
        let first = withExactCopy(input[start..<start + split]) { decodeOne($0, state: &state, authenticated: authenticated) }
        let second = first ?? withExactCopy(input[start..<start + available]) { decodeOne($0, state: &state, authenticated: authenticated) }
        switch event {
        case .needMore(let pending):
            check(second == nil && pending == available, "a split stream stopped waiting")
            return
        case .request(_, let consumed), .skipped(let consumed):
            check(first == nil || split >= consumed, "decided on \(split) bytes of a request of \(consumed)")
            check(second == event, "an event decodes otherwise when split at \(split)")
            start += consumed
        case .error:
            check(second == event, "an error decodes otherwise when split at \(split)")
            return
        }
    }
}

/// The arguments of a request, sent again as a multibulk request, decode to the same arguments.
private func checkReencoding(_ arguments: [[UInt8]]) {
    var count = RESPEncoder.arrayHeaderCount(arguments.count)
    for argument in arguments { count += RESPEncoder.bulkStringCount(length: argument.count) }
    var n = RESPEncoder.writeArrayHeader(arguments.count, to: scratch)
    for argument in arguments {
        n += argument.withUnsafeBytes { RESPEncoder.writeBulkString($0, to: scratch + n) }
    }
    check(n == count, "wrote \(n) bytes of a multibulk sized \(count)")
    var state = RESPDecodeState()
    let outcome = redecoder.decode(UnsafeRawBufferPointer(start: scratch, count: n), state: &state, authenticated: true)
    check(outcome == .request(consumed: n), "a re-encoded request gives \(outcome)")
    check(redecoder.arguments.map { Array($0) } == arguments, "a re-encoded request has other arguments")
}

/// The errors that quote a request are one line each, of the size their count says, and the
/// command lookup agrees with the table of names.
private func checkCommandErrors(_ arguments: [[UInt8]]) {
    var storage: [UInt8] = arguments.flatMap { $0 }
    storage.withUnsafeMutableBytes { raw in
        var offset = 0
        var spans: [UnsafeRawBufferPointer] = []
        for argument in arguments {
            spans.append(UnsafeRawBufferPointer(rebasing: raw[offset..<offset + argument.count]))
            offset += argument.count
        }
        spans.withUnsafeBufferPointer { spans in
            let unknown = RESPEncoder.unknownCommandCount(spans)
            checkOneLine(count: unknown, RESPEncoder.writeUnknownCommand(spans, to: scratch), prefix: "-ERR unknown command '")
            if spans.count >= 2 {
                let sub = RESPEncoder.unknownSubcommandCount(spans)
                checkOneLine(count: sub, RESPEncoder.writeUnknownSubcommand(spans, to: scratch), prefix: "-ERR unknown subcommand '")
            }
            let found = RESPCommandName.lookup(spans[0])
            let expected = RESPCommandName.allCases.first { command in
                command.name.withUTF8Buffer { name in
                    name.count == arguments[0].count && zip(name, arguments[0]).allSatisfy { n, a in
                        a == n || (a >= 0x41 && a <= 0x5A && a | 0x20 == n)
                    }
                }
            }
            check(found == expected, "lookup found \(String(describing: found)), the table \(String(describing: expected))")
        }
    }
}

private func checkOneLine(count: Int, _ written: Int, prefix: StaticString) {
    check(written == count, "wrote \(written) bytes of a reply sized \(count)")
    let reply = Array(UnsafeRawBufferPointer(start: scratch, count: written))
    check(reply.starts(with: prefix.withUTF8Buffer { Array($0) }), "a reply with another beginning")
    check(reply.suffix(2) == [0x0D, 0x0A] && !reply.dropLast(2).contains { $0 == 0x0D || $0 == 0x0A },
          "a reply that is not one line")
}

private func checkErrorReply(_ error: RESPProtocolError) {
    let n = error.write(to: scratch)
    check(n == error.replyCount, "replyCount \(error.replyCount) for \(n) bytes")
    let reply = Array(UnsafeRawBufferPointer(start: scratch, count: n))
    check(reply.starts(with: Array("-ERR Protocol error: ".utf8)), "a protocol error with another beginning")
    check(reply.suffix(2) == [0x0D, 0x0A] && !reply.dropLast(2).contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 },
          "a protocol error that is not one line")
}

/// Redis's rules read plainly from networking.c and sds.c, a whole request at a time, over
/// arrays: how `processInlineBuffer`, `processMultibulkBuffer` and `sdssplitargs` treat the
/// bytes that have arrived, if they arrive one at a time.
private struct Reference {
    let authenticated: Bool

    func events(of input: [UInt8]) -> [Event] {
        var events: [Event] = []
        var offset = 0
        while true {
            let event = next(input[offset...])
            events.append(event)
            switch event {
            case .request(_, let consumed), .skipped(let consumed): offset += consumed
            case .error, .needMore: return events
            }
        }
    }

    private enum Line: Equatable {
        case end(Int)
        case waiting
        case tooLong
    }

    /// Where the line at `start` ends: its terminator must come within the first
    /// `maxInlineBytes + 1` bytes, and before any NUL, where strchr stops looking.
    private func line(_ b: ArraySlice<UInt8>, from start: Int, _ terminator: UInt8) -> Line {
        var i = start
        while i < b.endIndex && i - start <= limits.maxInlineBytes {
            if b[i] == 0 { break }
            if b[i] == terminator { return .end(i) }
            i += 1
        }
        return b.endIndex - start > limits.maxInlineBytes ? .tooLong : .waiting
    }

    /// The next event of `b`, whose indices are those of the whole input.
    private func next(_ b: ArraySlice<UInt8>) -> Event {
        guard let first = b.first else { return .needMore(pending: 0) }
        return first == UInt8(ascii: "*") ? multibulk(b) : inline(b)
    }

    private func inline(_ b: ArraySlice<UInt8>) -> Event {
        let s = b.startIndex
        switch line(b, from: s, 0x0A) {
        case .waiting: return .needMore(pending: b.count)
        case .tooLong: return .error(.tooBigInlineRequest)
        case .end(let lf):
            var content = Array(b[s..<lf])
            if content.last == 0x0D { content.removeLast() }
            guard let arguments = splitArguments(content) else { return .error(.unbalancedQuotes) }
            if arguments.count > limits.maxArguments { return .error(.tooBigInlineRequest) }
            return arguments.isEmpty ? .skipped(consumed: lf + 1 - s) : .request(arguments, consumed: lf + 1 - s)
        }
    }

    private func multibulk(_ b: ArraySlice<UInt8>) -> Event {
        let s = b.startIndex
        guard case .end(let cr) = line(b, from: s, 0x0D) else {
            return line(b, from: s, 0x0D) == .tooLong ? .error(.tooBigMultibulkCountString) : .needMore(pending: b.count)
        }
        guard cr + 1 < b.endIndex else { return .needMore(pending: b.count) }
        guard let count = number(b[s + 1..<cr]), count <= limits.maxArguments else { return .error(.invalidMultibulkLength) }
        if !authenticated && count > limits.unauthenticatedMaxArguments { return .error(.unauthenticatedMultibulkLength) }
        if count <= 0 { return .skipped(consumed: cr + 2 - s) }
        var position = cr + 2
        var arguments: [[UInt8]] = []
        var payload = 0
        for _ in 0..<count {
            guard case .end(let cr) = line(b, from: position, 0x0D) else {
                return line(b, from: position, 0x0D) == .tooLong ? .error(.tooBigBulkCountString) : .needMore(pending: b.count)
            }
            guard cr + 1 < b.endIndex else { return .needMore(pending: b.count) }
            guard b[position] == UInt8(ascii: "$") else { return .error(.expectedDollar(got: b[position])) }
            guard let length = number(b[position + 1..<cr]), length >= 0, length <= limits.maxBulkBytes else {
                return .error(.invalidBulkLength)
            }
            if !authenticated && length > limits.unauthenticatedMaxBulkBytes { return .error(.unauthenticatedBulkLength) }
            payload += Int(length)
            if payload > limits.maxRequestPayloadBytes { return .error(.tooBigRequest) }
            let body = cr + 2
            guard b.endIndex >= body + Int(length) + 2 else { return .needMore(pending: b.count) }
            arguments.append(Array(b[body..<body + Int(length)]))
            position = body + Int(length) + 2
        }
        return .request(arguments, consumed: position - s)
    }

    /// string2ll: `0`, or an optional `-` then a digit 1-9 and more digits; at most 20 bytes,
    /// within Int64.
    private func number(_ bytes: ArraySlice<UInt8>) -> Int64? {
        guard bytes.count >= 1 && bytes.count <= 20 else { return nil }
        let digits = bytes.first == UInt8(ascii: "-") ? bytes.dropFirst() : bytes
        guard let lead = digits.first, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        if bytes.count == 1 && lead == 0x30 { return 0 }
        guard lead != 0x30 else { return nil }
        return Int64(String(decoding: bytes, as: UTF8.self))
    }

    /// sdssplitargs, step by step as the C reads it, with a NUL after the last byte.
    private func splitArguments(_ line: [UInt8]) -> [[UInt8]]? {
        func at(_ p: Int) -> UInt8 { p < line.count ? line[p] : 0 }
        func isSpace(_ c: UInt8) -> Bool { c == 0x20 || (c >= 0x09 && c <= 0x0D) }
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x41...0x46: c - 0x41 + 10
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        let backslash = UInt8(ascii: "\\"), doubleQuote = UInt8(ascii: "\""), singleQuote = UInt8(ascii: "'")
        var p = 0
        var arguments: [[UInt8]] = []
        while true {
            while at(p) != 0 && isSpace(at(p)) { p += 1 }
            if at(p) == 0 { return arguments }
            var inDoubleQuotes = false, inSingleQuotes = false, done = false
            var current: [UInt8] = []
            while !done {
                if inDoubleQuotes {
                    if at(p) == backslash && at(p + 1) == UInt8(ascii: "x"), let high = hex(at(p + 2)), let low = hex(at(p + 3)) {
                        current.append(high * 16 + low)
                        p += 3
                    } else if at(p) == backslash && at(p + 1) != 0 {
                        p += 1
                        switch at(p) {
                        case UInt8(ascii: "n"): current.append(0x0A)
                        case UInt8(ascii: "r"): current.append(0x0D)
                        case UInt8(ascii: "t"): current.append(0x09)
                        case UInt8(ascii: "b"): current.append(0x08)
                        case UInt8(ascii: "a"): current.append(0x07)
                        default: current.append(at(p))
                        }
                    } else if at(p) == doubleQuote {
                        if at(p + 1) != 0 && !isSpace(at(p + 1)) { return nil }
                        done = true
                    } else if at(p) == 0 {
                        return nil
                    } else {
                        current.append(at(p))
                    }
                } else if inSingleQuotes {
                    if at(p) == backslash && at(p + 1) == singleQuote {
                        p += 1
                        current.append(singleQuote)
                    } else if at(p) == singleQuote {
                        if at(p + 1) != 0 && !isSpace(at(p + 1)) { return nil }
                        done = true
                    } else if at(p) == 0 {
                        return nil
                    } else {
                        current.append(at(p))
                    }
                } else {
                    switch at(p) {
                    case 0x20, 0x0A, 0x0D, 0x09, 0: done = true
                    case doubleQuote: inDoubleQuotes = true
                    case singleQuote: inSingleQuotes = true
                    default: current.append(at(p))
                    }
                }
                if at(p) != 0 { p += 1 }
            }
            arguments.append(current)
        }
    }
}
