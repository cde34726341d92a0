/// Replies of memcached's text protocol: `VALUE <key> <flags> <bytes> [<cas>]` lines, each
/// followed by its data, closed by `END`; `STORED`; `DELETED`/`NOT_FOUND`; and the errors
/// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`.
public enum MemcachedReplyParser: ReplyParser {
    public static func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult {
        guard let lf = bytes.lineFeed(from: 0) else { return waitForLine(bytes, from: 0) }
        let end = bytes.contentEnd(0, lf: lf)
        let length = lf + 1
        if bytes.equals(0, end, "ERROR") || bytes.begins(0, end, with: "CLIENT_ERROR ")
            || bytes.begins(0, end, with: "SERVER_ERROR ") {
            return .reply(Reply(length: length, outcome: .error))
        }
        switch expecting {
        case .lookup, .multiLookup:
            return parseValues(bytes, single: expecting == .lookup)
        case .write, .batchWrite:
            if bytes.equals(0, end, "STORED") { return .reply(Reply(length: length, outcome: .done)) }
            if bytes.equals(0, end, "NOT_STORED") { return .reply(Reply(length: length, outcome: .error)) }
        case .delete:
            if bytes.equals(0, end, "DELETED") { return .reply(Reply(length: length, outcome: .done)) }
            if bytes.equals(0, end, "NOT_FOUND") { return .reply(Reply(length: length, outcome: .notFound)) }
        case .fields, .update, .exists, .auth, .count, .listing:
            break
        }
        return .garbage("unexpected reply to \(expecting): \(visible(bytes))")
    }

    private static func parseValues(_ bytes: UnsafeRawBufferPointer, single: Bool) -> ParseResult {
        var start = 0
        var hits = 0
        while true {
            guard let lf = bytes.lineFeed(from: start) else { return waitForLine(bytes, from: start) }
            let end = bytes.contentEnd(start, lf: lf)
            if bytes.equals(start, end, "END") {
                return .reply(Reply(length: lf + 1, outcome: single && hits == 0 ? .notFound : .done, hits: hits))
            }
            guard bytes.begins(start, end, with: "VALUE "), let size = dataSize(bytes, start + 6, end) else {
                return .garbage("unexpected line in a get reply: \(visible(bytes, from: start))")
            }
            let dataEnd = lf + 1 + size
            guard dataEnd + 2 <= bytes.count else { return .incomplete }
            guard bytes[dataEnd] == 0x0D, bytes[dataEnd + 1] == 0x0A else {
                return .garbage("a value's data does not end in CR LF after \(size) bytes: \(visible(bytes, from: start))")
            }
            hits += 1
            start = dataEnd + 2
        }
    }

    /// The `<bytes>` field of `<key> <flags> <bytes> [<cas>]`.
    private static func dataSize(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Int? {
        var fields: [(Int, Int)] = []
        var i = start
        while i < end, fields.count < 4 {
            while i < end, bytes[i] == 0x20 { i += 1 }
            let fieldStart = i
            while i < end, bytes[i] != 0x20 { i += 1 }
            if i > fieldStart { fields.append((fieldStart, i)) }
        }
        guard fields.count >= 3 else { return nil }
        return bytes.decimal(fields[2].0, fields[2].1)
    }
}
