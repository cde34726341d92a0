import WireBytes

/// Where a token's bytes lie in its line buffer.
@usableFromInline
struct Span {
    @usableFromInline var start: Int
    @usableFromInline var count: Int

    @usableFromInline
    init(start: Int, count: Int) {
        self.start = start
        self.count = count
    }
}

/// Walks the tokens of one line (without its LF), checking every PARSE rule and
/// unescaping quoted tokens in place, which only ever shrinks them.
///
/// Token rules, from the protocol:
/// - Tokens are separated by runs of spaces and tabs.
/// - A bare token is a run of bytes other than space, tab, CR and LF that does not
///   start with `"`. A `"` or `\` later in it is an ordinary byte, so `ab"c` is one
///   bare token; so are control bytes other than NUL, CR and LF.
/// - A quoted token runs from `"` to the next unescaped `"`, which must be followed by
///   a blank or the end of the line. Escapes are `\" \\ \n \r \t \xHH`; a raw byte
///   below 0x20 inside the quotes is an error.
/// - A CR anywhere is an error (the framer already dropped the one before the LF).
/// - After unescaping, a token must be valid UTF-8 without NUL.
struct TokenCursor {
    private let base: UnsafeMutableRawPointer
    private let end: Int
    private var position = 0

    init(base: UnsafeMutableRawPointer, count: Int) {
        self.base = base
        self.end = count
    }

    /// The next token, or nil at the end of the line.
    ///
    /// - Throws: A PARSE error for the first rule the token breaks.
    mutating func next() throws(ProtocolError) -> Span? {
        var i = position
        while i < end && isBlank(byte(i)) {
            i += 1
        }
        if i == end {
            position = i
            return nil
        }
        return byte(i) == ASCII.quote ? try quoted(from: i) : try bare(from: i)
    }

    private mutating func bare(from start: Int) throws(ProtocolError) -> Span {
        var i = start
        var hasNonASCII = false
        // Skip eight bytes at a time while all are '!'...DEL, the common case; in the word
        // that ends the run, skip to its first other byte, which the byte loop then handles.
        while i + 8 <= end {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            let ordinary = leadingASCIIBytes(atLeast: 0x21, in: word)
            i += ordinary
            if ordinary < 8 {
                break
            }
        }
        while i < end {
            let b = byte(i)
            if b &- 0x21 < 0x5F {  // '!'...DEL: the common case, one compare
                i += 1
                continue
            }
            if isBlank(b) {
                break
            }
            switch b {
            case 0x80...: hasNonASCII = true
            case ASCII.cr: throw ProtocolError.strayCR
            case ASCII.lf: throw ProtocolError.lineFeed
            case 0: throw ProtocolError.nul
            default: break
            }
            i += 1
        }
        position = i
        return try checked(Span(start: start, count: i - start), hasNonASCII: hasNonASCII)
    }

    private mutating func quoted(from quote: Int) throws(ProtocolError) -> Span {
        let start = quote + 1
        var read = start
        var write = start
        var hasNonASCII = false
        while true {
            guard read < end else {
                throw ProtocolError.unterminated
            }
            var b = byte(read)
            read += 1
            if b == ASCII.quote {
                break
            }
            if b == ASCII.backslash {
                guard read < end else {
                    throw ProtocolError.unterminated
                }
                let escape = byte(read)
                read += 1
                switch escape {
                case ASCII.quote, ASCII.backslash: b = escape
                case UInt8(ascii: "n"): b = ASCII.lf
                case UInt8(ascii: "r"): b = ASCII.cr
                case UInt8(ascii: "t"): b = ASCII.tab
                case UInt8(ascii: "x"):
                    guard read + 1 < end, let high = hexValue(byte(read)), let low = hexValue(byte(read + 1)) else {
                        throw ProtocolError.badEscape
                    }
                    read += 2
                    b = high << 4 | low
                    if b == 0 {
                        throw ProtocolError.nul
                    }
                default:
                    throw ProtocolError.badEscape
                }
            } else if b < 0x20 {
                throw b == ASCII.cr ? ProtocolError.strayCR : ProtocolError.controlInQuotes
            }
            if b >= 0x80 {
                hasNonASCII = true
            }
            base.storeBytes(of: b, toByteOffset: write, as: UInt8.self)
            write += 1
        }
        if read < end && !isBlank(byte(read)) {
            throw ProtocolError.quoteNotFollowedByBlank
        }
        position = read
        return try checked(Span(start: start, count: write - start), hasNonASCII: hasNonASCII)
    }

    private func checked(_ span: Span, hasNonASCII: Bool) throws(ProtocolError) -> Span {
        if hasNonASCII && !isValidUTF8(base + span.start, count: span.count) {
            throw ProtocolError.invalidUTF8
        }
        return span
    }

    @inline(__always)
    private func byte(_ i: Int) -> UInt8 {
        base.load(fromByteOffset: i, as: UInt8.self)
    }
}

@inline(__always)
private func isBlank(_ b: UInt8) -> Bool {
    b == ASCII.space || b == ASCII.tab
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

extension ProtocolError {
    static var unterminated: ProtocolError { ProtocolError(.parse, "missing closing quote") }
    static var badEscape: ProtocolError { ProtocolError(.parse, "bad escape in quoted token") }
    static var controlInQuotes: ProtocolError { ProtocolError(.parse, "raw control byte inside quotes") }
    static var quoteNotFollowedByBlank: ProtocolError { ProtocolError(.parse, "closing quote not followed by a blank") }
    static var strayCR: ProtocolError { ProtocolError(.parse, "stray CR") }
    static var lineFeed: ProtocolError { ProtocolError(.parse, "LF inside a line") }
    static var nul: ProtocolError { ProtocolError(.parse, "NUL byte") }
    static var invalidUTF8: ProtocolError { ProtocolError(.parse, "invalid UTF-8") }
}
