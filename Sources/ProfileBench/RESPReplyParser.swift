/// Replies of Redis's RESP2: `+simple`, `-error`, `:integer`, `$n` bulk strings (`$-1` is
/// null) and `*n` arrays, each line ending in CR LF.
public enum RESPReplyParser: ReplyParser {
    public static func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult {
        let element: Element
        switch scan(bytes, at: 0, depth: 0) {
        case .incomplete: return .incomplete
        case .garbage(let message): return .garbage(message)
        case .element(let e): element = e
        }
        let length = element.end
        switch (expecting, element.kind) {
        case (_, .error):
            return .reply(Reply(length: length, outcome: .error))
        case (.lookup, .bulk(let isNull)):
            return .reply(Reply(length: length, outcome: isNull ? .notFound : .done, hits: isNull ? 0 : 1))
        case (.multiLookup, .array(_, let found)):
            return .reply(Reply(length: length, outcome: .done, hits: found))
        case (.write, .simple(let isOK)), (.batchWrite, .simple(let isOK)), (.auth, .simple(let isOK)):
            if isOK { return .reply(Reply(length: length, outcome: .done)) }
        case (.delete, .integer(let n)):
            return .reply(Reply(length: length, outcome: n > 0 ? .done : .notFound))
        case (.exists, .integer(let n)):
            return .reply(Reply(length: length, outcome: n > 0 ? .done : .notFound, hits: n > 0 ? 1 : 0))
        default:
            break
        }
        return .garbage("unexpected reply to \(expecting): \(visible(bytes))")
    }

    struct Element {
        enum Kind {
            case simple(isOK: Bool)
            case error
            case integer(Int)
            case bulk(isNull: Bool)
            /// An array, and how many of its elements are non-null bulk strings.
            case array(count: Int, found: Int)
        }
        var kind: Kind
        var end: Int
    }

    enum Scan {
        case incomplete
        case garbage(String)
        case element(Element)
    }

    /// The element that starts at `start`, with the index just past it.
    static func scan(_ bytes: UnsafeRawBufferPointer, at start: Int, depth: Int) -> Scan {
        guard start < bytes.count else { return .incomplete }
        guard let lf = bytes.lineFeed(from: start) else {
            return waitForLine(bytes, from: start) == .incomplete ? .incomplete
                : .garbage("no line end in \(longestReplyLine) bytes: \(visible(bytes, from: start))")
        }
        guard lf > start + 1, bytes[lf - 1] == 0x0D else {
            return .garbage("a RESP line does not end in CR LF: \(visible(bytes, from: start))")
        }
        let end = lf - 1
        let next = lf + 1
        switch bytes[start] {
        case UInt8(ascii: "+"):
            return .element(Element(kind: .simple(isOK: bytes.equals(start + 1, end, "OK")), end: next))
        case UInt8(ascii: "-"):
            return .element(Element(kind: .error, end: next))
        case UInt8(ascii: ":"):
            guard let n = signedNumber(bytes, start + 1, end) else { break }
            return .element(Element(kind: .integer(n), end: next))
        case UInt8(ascii: "_"):
            guard end == start + 1 else { break }
            return .element(Element(kind: .bulk(isNull: true), end: next))
        case UInt8(ascii: "$"):
            guard let n = signedNumber(bytes, start + 1, end), n >= -1 else { break }
            if n == -1 { return .element(Element(kind: .bulk(isNull: true), end: next)) }
            guard next + n + 2 <= bytes.count else { return .incomplete }
            guard bytes[next + n] == 0x0D, bytes[next + n + 1] == 0x0A else {
                return .garbage("a bulk string does not end in CR LF after \(n) bytes: \(visible(bytes, from: start))")
            }
            return .element(Element(kind: .bulk(isNull: false), end: next + n + 2))
        case UInt8(ascii: "*"):
            guard depth < 8, let n = signedNumber(bytes, start + 1, end), n >= -1 else { break }
            var position = next
            var found = 0
            for _ in 0..<max(n, 0) {
                switch scan(bytes, at: position, depth: depth + 1) {
                case .element(let element):
                    if case .bulk(isNull: false) = element.kind { found += 1 }
                    position = element.end
                case let other:
                    return other
                }
            }
            return .element(Element(kind: .array(count: max(n, 0), found: found), end: position))
        default:
            break
        }
        return .garbage("not a RESP reply: \(visible(bytes, from: start))")
    }

    /// An array of bulk strings or nulls at the start of `bytes` (HGETALL's and HMGET's
    /// replies, most of the hash workload), read in one pass: its count, how many are not
    /// null, and the index just past it. Nil for anything else, or for one not whole yet,
    /// which `scan` then reads (and words the garbage). The general scan took about 820
    /// instructions an HGETALL reply, more than the rest of the load loop's work for one
    /// request; the harness shares the cores with the server it measures.
    @inline(__always)
    static func bulkStringArray(_ bytes: UnsafeRawBufferPointer) -> (count: Int, found: Int, end: Int)? {
        guard !bytes.isEmpty, bytes[0] == UInt8(ascii: "*"), let (count, afterHeader) = length(bytes, from: 1),
              count >= 0 else { return nil }
        var position = afterHeader
        var found = 0
        for _ in 0..<count {
            guard position < bytes.count, bytes[position] == UInt8(ascii: "$"),
                  let (n, next) = length(bytes, from: position + 1) else { return nil }
            if n == -1 {
                position = next
                continue
            }
            guard n >= 0, next + n + 2 <= bytes.count, bytes[next + n] == 0x0D, bytes[next + n + 1] == 0x0A else { return nil }
            found += 1
            position = next + n + 2
        }
        return (count, found, position)
    }

    /// The decimal (an optional minus, then up to 18 digits) from `start` to a CR LF, and the
    /// index just past the LF; nil for anything else.
    @inline(__always)
    private static func length(_ bytes: UnsafeRawBufferPointer, from start: Int) -> (Int, Int)? {
        var index = start
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let first = index
        var value = 0
        while index < bytes.count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            if digit >= 10 {
                guard bytes[index] == 0x0D, index > first, index - first <= 18, index + 1 < bytes.count,
                      bytes[index + 1] == 0x0A else { return nil }
                return (negative ? -value : value, index + 2)
            }
            value = value * 10 + Int(digit)
            index += 1
        }
        return nil
    }

    private static func signedNumber(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Int? {
        if start < end, bytes[start] == UInt8(ascii: "-") {
            return bytes.decimal(start + 1, end).map { -$0 }
        }
        return bytes.decimal(start, end)
    }
}
