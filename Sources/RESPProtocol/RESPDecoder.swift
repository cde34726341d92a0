import Glibc

/// The outcome of `RESPDecoder.decode`.
///
/// A plain value; any thread may use it.
public enum RESPDecodeResult: Equatable, Sendable {
    /// A whole request: its arguments are the decoder's `arguments`, and its bytes are the
    /// first `consumed` of the input.
    case request(consumed: Int)
    /// The first `consumed` bytes hold nothing to answer: a blank inline line, or a multibulk
    /// count of zero or less (Redis skips both without a reply).
    case skipped(consumed: Int)
    /// Not a whole request yet: keep every byte, read more, and call again with the same state.
    case needMore
    /// The input breaks a rule: send the error's reply and close the connection.
    case error(RESPProtocolError)
}

/// How far decoding got into a request that has not fully arrived, so the next `decode`
/// resumes there instead of reading the request again.
///
/// A plain value, one per connection: start with `RESPDecodeState()` and pass the same value
/// to every `decode` of that connection's input. `decode` resets it after each request, so
/// it only changes hands between threads along with the connection.
public struct RESPDecodeState: Equatable, Sendable {
    /// Arguments the multibulk's count line announced; 0 before the count is read, and for
    /// inline requests.
    var argumentsExpected = 0
    /// Bulk strings of the request fully received.
    var argumentsParsed = 0
    /// Where the next part starts, from the request's first byte: a length line, or the
    /// body of a bulk string when `bulkLength` is known.
    var offset = 0
    /// Bytes of the line at `offset` already searched for its end without finding it; past
    /// `maxInlineBytes` once a NUL has shown that the line never ends.
    var searched = 0
    /// The length of the bulk string whose body starts at `offset`; -1 while its length line
    /// is still to be read.
    var bulkLength = -1
    /// Payload announced by the length lines read so far, against `maxRequestPayloadBytes`.
    var payloadBytes = 0

    public init() {}
}

/// Decodes RESP requests, multibulk and inline, from the front of a connection's input,
/// without allocating and without changing the input.
///
/// Not thread-safe: make one per thread and use it for all that thread's connections, each
/// with its own `RESPDecodeState`. It owns the argument table and, for inline arguments
/// with quotes, the buffer they are unescaped into. The arguments of a request point into
/// the caller's input or into that buffer, so they are valid until the input changes or the
/// next `decode`.
public final class RESPDecoder {
    public let limits: RESPLimits
    /// One view per argument of the last request, `limits.maxArguments` of them; after
    /// `decodeAhead`, the arguments of every request it read, one after the other.
    private let views: UnsafeMutablePointer<UnsafeRawBufferPointer>
    /// Unescaped inline arguments: never longer than the line they come from.
    private let scratch: UnsafeMutableRawPointer
    /// Where in `views` the last request's arguments start, and how many it has.
    private var firstArgument = 0
    private var argumentCount = 0
    /// The requests `decodeAhead` read: where each one's arguments start in `views`, how many
    /// it has, and how many bytes it takes. `decode` hands out the next while it is asked for
    /// the bytes where that one starts (`aheadStart`), under the same authentication.
    private let ahead: UnsafeMutablePointer<(first: Int, count: Int, consumed: Int)>
    private var aheadCount = 0
    private var aheadNext = 0
    private var aheadStart: UnsafeRawPointer? = nil
    private var aheadAuthenticated = false
    /// The most requests one `decodeAhead` reads.
    public static let aheadCapacity = 64

    public init(limits: RESPLimits = RESPLimits()) {
        precondition(limits.maxArguments >= 1 && limits.maxInlineBytes >= 1, "a request needs room for one argument")
        precondition(limits.maxBulkBytes >= 0 && limits.maxRequestPayloadBytes >= 0
                     && limits.unauthenticatedMaxArguments >= 0 && limits.unauthenticatedMaxBulkBytes >= 0,
                     "negative limit")
        self.limits = limits
        views = .allocate(capacity: limits.maxArguments)
        views.initialize(repeating: UnsafeRawBufferPointer(start: nil, count: 0), count: limits.maxArguments)
        scratch = .allocate(byteCount: limits.maxInlineBytes, alignment: 1)
        ahead = .allocate(capacity: Self.aheadCapacity)
    }

    deinit {
        views.deallocate()
        scratch.deallocate()
        ahead.deallocate()
    }

    /// The arguments of the request the last `decode` returned, the command name first;
    /// empty after any other result.
    public var arguments: UnsafeBufferPointer<UnsafeRawBufferPointer> {
        UnsafeBufferPointer(start: views + firstArgument, count: argumentCount)
    }

    /// Which of the requests the last `decodeAhead` read the last `decode` handed out, so that
    /// what a server learned of it then (its command, say) serves again; -1 when that `decode`
    /// read its request afresh, or returned anything else.
    public private(set) var aheadIndex = -1

    /// Reads ahead the whole requests in their plainest form (`decodeWholeMultibulk`) at the
    /// start of `input`, at most `limit` of them, and returns how many it read, so that a
    /// server can look at a pass's requests (`aheadArguments`) before it serves them, and
    /// `decode` then hands each out without reading it again. It stops at the first other
    /// request (inline, cut off, or any other form), which `decode` reads as usual.
    ///
    /// Call it at the start of every pass over a connection's input, with a `limit` of 0 when
    /// the connection is in the middle of a request: what an earlier pass read ahead, over
    /// other bytes, is forgotten then. `decode` forgets it too when asked for other bytes.
    public func decodeAhead(_ input: UnsafeRawBufferPointer, limit: Int, authenticated: Bool) -> Int {
        aheadCount = 0
        aheadNext = 0
        argumentCount = 0
        firstArgument = 0
        guard let base = input.baseAddress else { return 0 }
        aheadStart = base
        aheadAuthenticated = authenticated
        let most = min(limit, Self.aheadCapacity)
        var offset = 0
        var first = 0
        while aheadCount < most && offset < input.count
                && base.load(fromByteOffset: offset, as: UInt8.self) == ASCII.star,
              let consumed = decodeWholeMultibulk(base + offset, count: input.count - offset,
                                                  authenticated: authenticated, into: first) {
            ahead[aheadCount] = (first, argumentCount, consumed)
            aheadCount += 1
            first += argumentCount
            offset += consumed
        }
        argumentCount = 0
        return aheadCount
    }

    /// The arguments of request `index` of those the last `decodeAhead` read, the command
    /// name first; valid until the next `decodeAhead` or a `decode` of other bytes.
    public func aheadArguments(_ index: Int) -> UnsafeBufferPointer<UnsafeRawBufferPointer> {
        precondition(index >= aheadNext && index < aheadCount, "no request \(index) read ahead")
        return UnsafeBufferPointer(start: views + ahead[index].first, count: ahead[index].count)
    }

    /// Decodes the request at the start of `input`.
    ///
    /// A request that starts with `*` is a multibulk, any other an inline command, as in
    /// Redis. Parts already read in earlier calls are not read again: `state` says where
    /// they end, and bulk bodies are skipped by their length. A request costs time in
    /// proportion to its bytes and its arguments however it is split across calls.
    ///
    /// - Parameters:
    ///   - input: The connection's unconsumed bytes. Between calls about one request it may
    ///     move and grow, but its first bytes must stay the same.
    ///   - state: The connection's decoding state, updated for the next call.
    ///   - authenticated: Whether the connection may send requests beyond the
    ///     unauthenticated limits.
    /// - Returns: A request, a skip, `.needMore`, or the error that ends the connection.
    public func decode(
        _ input: UnsafeRawBufferPointer, state: inout RESPDecodeState, authenticated: Bool
    ) -> RESPDecodeResult {
        argumentCount = 0
        firstArgument = 0
        aheadIndex = -1
        guard let base = input.baseAddress, input.count > 0 else {
            return .needMore
        }
        if aheadNext < aheadCount {
            if base == aheadStart && authenticated == aheadAuthenticated && state == RESPDecodeState() {
                let request = ahead[aheadNext]
                aheadIndex = aheadNext
                aheadNext += 1
                aheadStart = base + request.consumed
                firstArgument = request.first
                argumentCount = request.count
                return .request(consumed: request.consumed)
            }
            // Asked for other bytes: what was read ahead is no longer theirs.
            aheadCount = 0
        }
        if base.load(as: UInt8.self) == ASCII.star {
            if state.argumentsExpected == 0 && state.searched == 0,
               let consumed = decodeWholeMultibulk(base, count: input.count, authenticated: authenticated, into: 0) {
                return .request(consumed: consumed)
            }
            return decodeMultibulk(base, count: input.count, state: &state, authenticated: authenticated)
        }
        return decodeInline(base, count: input.count, state: &state)
    }

    // MARK: Lines

    private enum LineEnd {
        /// The index of the line's terminator in the input.
        case found(Int)
        case waiting
        case tooLong
    }

    /// Looks for the end of the line at `start`, as Redis does with `strchr` and the
    /// PROTO_INLINE_MAX_SIZE check.
    ///
    /// The terminator must be among the line's first `maxInlineBytes + 1` bytes: Redis,
    /// reading a byte at a time, would refuse the line as soon as that many had arrived
    /// without it. Deciding on those bytes alone makes the answer the same however the input
    /// was split. Like `strchr`, the search stops at a NUL: a line with a NUL before its
    /// terminator never ends, and is too long once more than `maxInlineBytes` bytes have
    /// arrived from its start (Redis's "protocol desync" tests rely on this).
    ///
    /// - Parameter searched: Bytes of the line already searched in vain; updated.
    @inline(__always)
    private func lineEnd(
        _ terminator: UInt8, in base: UnsafeRawPointer, count: Int, start: Int, searched: inout Int
    ) -> LineEnd {
        let limit = limits.maxInlineBytes
        let available = count - start
        let window = min(available, limit + 1)
        if searched == 0 {
            // A multibulk's count and length lines are a few bytes: read up to 16 one by one
            // before the two memchr calls, which cost more than that on lines this short.
            let quick = min(window, 16)
            while searched < quick {
                let byte = base.load(fromByteOffset: start + searched, as: UInt8.self)
                if byte == terminator { return .found(start + searched) }
                if byte == 0 {
                    searched = limit + 1
                    break
                }
                searched += 1
            }
        }
        if searched < window {
            let region = base + start + searched
            let regionCount = window - searched
            let found = memchr(region, Int32(terminator), regionCount)
            let beforeTerminator = found.map { region.distance(to: UnsafeRawPointer($0)) } ?? regionCount
            if memchr(region, 0, beforeTerminator) != nil {
                searched = limit + 1
            } else if found != nil {
                searched += beforeTerminator
                return .found(start + searched)
            } else {
                searched = window
            }
        }
        return available > limit ? .tooLong : .waiting
    }

    /// The common case in one pass: a whole multibulk request in its plainest form (each
    /// count and length decimal digits without a sign or a leading zero, each line ended by
    /// CR LF, each body by CR LF) within every limit. Returns the bytes it takes, having made
    /// the argument views; nil, having changed nothing, for anything else, which
    /// `decodeMultibulk` then reads with all of Redis's rules. The views go from `views[first]`,
    /// and the request has at most the arguments left from there.
    @inline(__always)
    private func decodeWholeMultibulk(_ base: UnsafeRawPointer, count: Int, authenticated: Bool, into first: Int) -> Int? {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        /// The number at `start` and where its line ends (the CR), for up to 9 digits.
        @inline(__always) func number(at start: Int) -> (value: Int, cr: Int)? {
            // A digit, then CR LF or more digits: a single digit, the count and the command's
            // length of nearly every request, is read without the loop.
            guard start + 2 < count else { return nil }
            let leading = byte(start) &- ASCII.zero
            guard leading <= 9 else { return nil }
            if byte(start + 1) == ASCII.cr { return byte(start + 2) == ASCII.lf ? (Int(leading), start + 1) : nil }
            // More digits: no leading zero, not too many, then CR LF.
            guard leading != 0 else { return nil }
            var i = start + 1
            var value = Int(leading)
            while i < count && i - start < 10 {
                let digit = byte(i) &- ASCII.zero
                guard digit <= 9 else { break }
                value = value * 10 + Int(digit)
                i += 1
            }
            guard i - start < 10, i + 1 < count, byte(i) == ASCII.cr, byte(i + 1) == ASCII.lf else { return nil }
            return (value, i)
        }
        guard let (arguments, countEnd) = number(at: 1), arguments >= 1, arguments <= limits.maxArguments - first,
              authenticated || arguments <= limits.unauthenticatedMaxArguments else { return nil }
        var offset = countEnd + 2
        var payload = 0
        for index in 0..<arguments {
            guard offset < count, byte(offset) == ASCII.dollar, let (length, lengthEnd) = number(at: offset + 1),
                  length <= limits.maxBulkBytes, authenticated || length <= limits.unauthenticatedMaxBulkBytes else { return nil }
            payload += length
            let body = lengthEnd + 2
            guard payload <= limits.maxRequestPayloadBytes, length + 2 <= count - body,
                  byte(body + length) == ASCII.cr, byte(body + length + 1) == ASCII.lf else { return nil }
            views[first + index] = UnsafeRawBufferPointer(start: base + body, count: length)
            offset = body + length + 2
        }
        argumentCount = arguments
        return offset
    }

    // MARK: Inline

    private func decodeInline(_ base: UnsafeRawPointer, count: Int, state: inout RESPDecodeState) -> RESPDecodeResult {
        switch lineEnd(ASCII.lf, in: base, count: count, start: 0, searched: &state.searched) {
        case .waiting:
            return .needMore
        case .tooLong:
            return .error(.tooBigInlineRequest)
        case .found(let lf):
            state = RESPDecodeState()
            let hasCR = lf > 0 && base.load(fromByteOffset: lf - 1, as: UInt8.self) == ASCII.cr
            if let error = splitInline(base, count: hasCR ? lf - 1 : lf) {
                return .error(error)
            }
            return argumentCount == 0 ? .skipped(consumed: lf + 1) : .request(consumed: lf + 1)
        }
    }

    /// Splits an inline request into arguments as Redis's `sdssplitargs` does.
    ///
    /// Blanks (C's `isspace`: space, tab, LF, VT, FF, CR) separate arguments; a bare
    /// argument ends at a space, tab, CR or LF. A quote anywhere in an argument starts a
    /// quoted part: inside `"..."` the escapes `\n \r \t \b \a \xHH` stand for their byte
    /// and a backslash before any other byte for that byte; inside `'...'` only `\'` is an
    /// escape. A closing quote must be followed by a blank or the end. Arguments without
    /// quotes are views of the input; the others are unescaped into `scratch`.
    ///
    /// Every argument is read, also past `maxArguments`, so that unbalanced quotes are
    /// reported as Redis would, ahead of the count, which Redis does not limit.
    ///
    /// - Returns: nil with `argumentCount` set, or the error.
    private func splitInline(_ base: UnsafeRawPointer, count end: Int) -> RESPProtocolError? {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        let capacity = limits.maxArguments
        var i = 0
        var count = 0
        var scratchUsed = 0
        while true {
            while i < end && isSpace(byte(i)) {
                i += 1
            }
            if i == end {
                break
            }
            let start = i
            while i < end && !endsBareRun(byte(i)) {
                i += 1
            }
            let argument: UnsafeRawBufferPointer
            if i < end && (byte(i) == ASCII.doubleQuote || byte(i) == ASCII.singleQuote) {
                let unescapedStart = scratchUsed
                (scratch + scratchUsed).copyMemory(from: base + start, byteCount: i - start)
                scratchUsed += i - start
                guard let next = unquote(base, end: end, from: i, scratchUsed: &scratchUsed) else {
                    return .unbalancedQuotes
                }
                i = next
                argument = UnsafeRawBufferPointer(start: scratch + unescapedStart, count: scratchUsed - unescapedStart)
            } else {
                argument = UnsafeRawBufferPointer(start: base + start, count: i - start)
            }
            if count < capacity {
                views[count] = argument
            }
            count += 1
        }
        guard count <= capacity else {
            return .tooBigInlineRequest
        }
        argumentCount = count
        return nil
    }

    /// Reads the rest of an argument from its first quote at `start`, appending its bytes to
    /// `scratch`.
    ///
    /// - Returns: Where the argument ends, or nil for unbalanced quotes.
    private func unquote(_ base: UnsafeRawPointer, end: Int, from start: Int, scratchUsed: inout Int) -> Int? {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        @inline(__always) func put(_ b: UInt8) {
            scratch.storeBytes(of: b, toByteOffset: scratchUsed, as: UInt8.self)
            scratchUsed += 1
        }
        /// Whether the quote at `i` may close: the end or a blank must follow it.
        @inline(__always) func closes(_ i: Int) -> Bool { i + 1 == end || isSpace(byte(i + 1)) }
        var i = start
        while i < end {
            let b = byte(i)
            switch b {
            case ASCII.space, ASCII.tab, ASCII.cr, ASCII.lf:
                return i
            case ASCII.doubleQuote:
                i += 1
                while true {
                    guard i < end else { return nil }
                    let c = byte(i)
                    if c == ASCII.backslash && i + 3 < end && byte(i + 1) == UInt8(ascii: "x"),
                       let high = hexValue(byte(i + 2)), let low = hexValue(byte(i + 3)) {
                        put(high << 4 | low)
                        i += 4
                    } else if c == ASCII.backslash && i + 1 < end {
                        put(unescaped(byte(i + 1)))
                        i += 2
                    } else if c == ASCII.doubleQuote {
                        guard closes(i) else { return nil }
                        return i + 1
                    } else {
                        put(c)
                        i += 1
                    }
                }
            case ASCII.singleQuote:
                i += 1
                while true {
                    guard i < end else { return nil }
                    let c = byte(i)
                    if c == ASCII.backslash && i + 1 < end && byte(i + 1) == ASCII.singleQuote {
                        put(ASCII.singleQuote)
                        i += 2
                    } else if c == ASCII.singleQuote {
                        guard closes(i) else { return nil }
                        return i + 1
                    } else {
                        put(c)
                        i += 1
                    }
                }
            default:
                put(b)
                i += 1
            }
        }
        return i
    }

    // MARK: Multibulk

    private func decodeMultibulk(
        _ base: UnsafeRawPointer, count: Int, state: inout RESPDecodeState, authenticated: Bool
    ) -> RESPDecodeResult {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        // Arguments read in earlier calls; their views are made once the request is whole,
        // since the input may have moved since.
        let earlierArguments = state.argumentsParsed
        if state.argumentsExpected == 0 {
            switch lineEnd(ASCII.cr, in: base, count: count, start: 0, searched: &state.searched) {
            case .waiting:
                return .needMore
            case .tooLong:
                return .error(.tooBigMultibulkCountString)
            case .found(let cr):
                // Redis wants one byte after the CR and skips it without checking it is an LF.
                guard cr + 1 < count else { return .needMore }
                guard let n = redisInteger(base + 1, count: cr - 1), n <= limits.maxArguments else {
                    return .error(.invalidMultibulkLength)
                }
                if n > limits.unauthenticatedMaxArguments && !authenticated {
                    return .error(.unauthenticatedMultibulkLength)
                }
                if n <= 0 {
                    state = RESPDecodeState()
                    return .skipped(consumed: cr + 2)
                }
                state.argumentsExpected = Int(n)
                state.offset = cr + 2
                state.searched = 0
            }
        }
        while state.argumentsParsed < state.argumentsExpected {
            if state.bulkLength < 0 {
                let start = state.offset
                switch lineEnd(ASCII.cr, in: base, count: count, start: start, searched: &state.searched) {
                case .waiting:
                    return .needMore
                case .tooLong:
                    return .error(.tooBigBulkCountString)
                case .found(let cr):
                    guard cr + 1 < count else { return .needMore }
                    // Redis looks at the `$` only once the whole line is there.
                    guard byte(start) == ASCII.dollar else {
                        return .error(.expectedDollar(got: byte(start)))
                    }
                    guard let n = redisInteger(base + start + 1, count: cr - start - 1), n >= 0, n <= limits.maxBulkBytes else {
                        return .error(.invalidBulkLength)
                    }
                    if n > limits.unauthenticatedMaxBulkBytes && !authenticated {
                        return .error(.unauthenticatedBulkLength)
                    }
                    let length = Int(n)
                    guard state.payloadBytes + length <= limits.maxRequestPayloadBytes else {
                        return .error(.tooBigRequest)
                    }
                    state.payloadBytes += length
                    state.bulkLength = length
                    state.offset = cr + 2
                    state.searched = 0
                }
            }
            // Redis takes the two bytes after a body for its CR LF without looking at them,
            // and so does this decoder: `$1\r\naXY` is the argument `a`.
            guard count - state.offset >= state.bulkLength + 2 else {
                return .needMore
            }
            views[state.argumentsParsed] = UnsafeRawBufferPointer(start: base + state.offset, count: state.bulkLength)
            state.offset += state.bulkLength + 2
            state.argumentsParsed += 1
            state.bulkLength = -1
        }
        if earlierArguments > 0 {
            recordViews(ofFirst: earlierArguments, in: base)
        }
        argumentCount = state.argumentsExpected
        let consumed = state.offset
        state = RESPDecodeState()
        return .request(consumed: consumed)
    }

    /// Makes the views of the first `count` arguments of the multibulk request at `base`,
    /// whose lines were all checked in earlier calls: each costs its length line, and its
    /// body is skipped.
    private func recordViews(ofFirst count: Int, in base: UnsafeRawPointer) {
        @inline(__always) func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }
        var position = 1
        while byte(position) != ASCII.cr {
            position += 1
        }
        position += 2
        for index in 0..<count {
            var i = position + 1
            var length = 0
            while byte(i) != ASCII.cr {
                length = length * 10 + Int(byte(i) &- ASCII.zero)
                i += 1
            }
            views[index] = UnsafeRawBufferPointer(start: base + i + 2, count: length)
            position = i + 2 + length + 2
        }
    }
}

@available(*, unavailable)
extension RESPDecoder: Sendable {}

/// C's `isspace` in the C locale, which `sdssplitargs` skips between arguments.
@inline(__always)
private func isSpace(_ b: UInt8) -> Bool {
    b == ASCII.space || (b >= ASCII.tab && b <= ASCII.cr)
}

/// Whether `b` ends a run of bare bytes: a byte that ends an unquoted argument, or a quote.
@inline(__always)
private func endsBareRun(_ b: UInt8) -> Bool {
    switch b {
    case ASCII.space, ASCII.tab, ASCII.cr, ASCII.lf, ASCII.doubleQuote, ASCII.singleQuote: true
    default: false
    }
}

/// The byte a backslash and `b` stand for inside double quotes.
@inline(__always)
private func unescaped(_ b: UInt8) -> UInt8 {
    switch b {
    case UInt8(ascii: "n"): ASCII.lf
    case UInt8(ascii: "r"): ASCII.cr
    case UInt8(ascii: "t"): ASCII.tab
    case UInt8(ascii: "b"): 0x08
    case UInt8(ascii: "a"): 0x07
    default: b
    }
}

@inline(__always)
private func hexValue(_ b: UInt8) -> UInt8? {
    switch b {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
    default: nil
    }
}
