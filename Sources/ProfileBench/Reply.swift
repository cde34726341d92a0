import Glibc

/// The kind of reply a request calls for; each protocol's parser knows what that looks like.
public enum ExpectedReply: Sendable, Equatable {
    /// One id looked up: found or not.
    case lookup
    /// Several ids looked up in one request.
    case multiLookup
    /// Both fields of one id, by name (HMGET): each present or null.
    case fields
    /// One profile or value written.
    case write
    /// Many written at once (MSET; memcached has none and sends one `set` per value).
    case batchWrite
    case update
    case delete
    case exists
    case auth
    /// `COUNT <n>`.
    case count
    /// Lines up to `END`: STATS, RECENT, SCAN.
    case listing
}

/// One whole reply at the front of the received bytes.
public struct Reply: Equatable, Sendable {
    public enum Outcome: Equatable, Sendable {
        /// What the request asked for happened (a lookup found its id, a write was stored).
        case done
        /// The id does not exist (GET, DEL, UPDATE of a missing id; EXISTS that says no).
        case notFound
        /// The server refused the request (`ERROR ...`, `-ERR ...`, `SERVER_ERROR ...`).
        case error
    }

    /// Bytes the reply takes, line ends included.
    public var length: Int
    public var outcome: Outcome
    /// Ids the reply found (lookups only; for a multi-lookup, how many of its ids).
    public var hits: Int

    public init(length: Int, outcome: Outcome, hits: Int = 0) {
        self.length = length
        self.outcome = outcome
        self.hits = hits
    }
}

/// What a parser makes of the bytes received so far.
public enum ParseResult: Equatable, Sendable {
    /// The bytes so far are the start of a valid reply: wait for more.
    case incomplete
    case reply(Reply)
    /// Bytes no valid reply starts with; the text says what and shows them.
    case garbage(String)
}

/// Parses one reply of a protocol from the front of a buffer. Parsers keep no state between
/// calls: when a reply is incomplete they start again from its first byte once more bytes
/// arrive (replies are short, so the repeat costs less than keeping state).
public protocol ReplyParser {
    static func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult
}

/// No reply line is longer than this; more bytes without a line end are garbage.
let longestReplyLine = 1 << 20

// MARK: Byte helpers shared by the parsers

extension UnsafeRawBufferPointer {
    /// The index of the next LF at or after `start`, or nil.
    @inline(__always)
    func lineFeed(from start: Int) -> Int? {
        guard start < count else { return nil }
        guard let found = memchr(baseAddress! + start, 0x0A, count - start) else { return nil }
        return UnsafeRawPointer(found) - baseAddress!
    }

    /// Whether bytes start..<end are exactly `literal`.
    @inline(__always)
    func equals(_ start: Int, _ end: Int, _ literal: StaticString) -> Bool {
        end - start == literal.utf8CodeUnitCount
            && memcmp(baseAddress! + start, literal.utf8Start, literal.utf8CodeUnitCount) == 0
    }

    /// Whether bytes start..<end begin with `literal`.
    @inline(__always)
    func begins(_ start: Int, _ end: Int, with literal: StaticString) -> Bool {
        end - start >= literal.utf8CodeUnitCount
            && memcmp(baseAddress! + start, literal.utf8Start, literal.utf8CodeUnitCount) == 0
    }

    /// The end of the line that ends at the LF at `lf`, without a CR before it.
    @inline(__always)
    func contentEnd(_ start: Int, lf: Int) -> Int {
        lf > start && self[lf - 1] == 0x0D ? lf - 1 : lf
    }

    /// The ASCII decimal number in start..<end, or nil (no sign, at most 18 digits).
    func decimal(_ start: Int, _ end: Int) -> Int? {
        guard end > start, end - start <= 18 else { return nil }
        var n = 0
        for i in start..<end {
            let d = Int(self[i]) - 0x30
            guard d >= 0 && d <= 9 else { return nil }
            n = n * 10 + d
        }
        return n
    }
}

/// Bytes shown to people: printable ASCII as is, everything else escaped, at most 80 bytes.
public func visible(_ bytes: UnsafeRawBufferPointer, from start: Int = 0) -> String {
    var text = ""
    let end = Swift.min(bytes.count, start + 80)
    for i in start..<end {
        let b = bytes[i]
        switch b {
        case 0x0A: text += "\\n"
        case 0x0D: text += "\\r"
        case 0x5C: text += "\\\\"
        case 0x20..<0x7F: text.unicodeScalars.append(Unicode.Scalar(b))
        default:
            let hex = Array("0123456789abcdef")
            text += "\\x\(hex[Int(b >> 4)])\(hex[Int(b & 15)])"
        }
    }
    if bytes.count > end { text += "..." }
    return "\"\(text)\""
}

/// `.incomplete` while a line may still be coming, garbage once it is too long to be one.
func waitForLine(_ bytes: UnsafeRawBufferPointer, from start: Int) -> ParseResult {
    bytes.count - start > longestReplyLine
        ? .garbage("no line end in \(longestReplyLine) bytes: \(visible(bytes, from: start))")
        : .incomplete
}
