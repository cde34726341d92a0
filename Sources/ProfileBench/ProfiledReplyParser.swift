/// Replies of the profile line protocol: one line, or for MGET `VALUE`/`NOTFOUND` lines
/// closed by `END`; `ERROR <code> <message>` answers any request in one line.
public enum ProfiledReplyParser: ReplyParser {
    public static func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult {
        guard let lf = bytes.lineFeed(from: 0) else { return waitForLine(bytes, from: 0) }
        let end = bytes.contentEnd(0, lf: lf)
        let length = lf + 1
        if bytes.equals(0, end, "ERROR") || bytes.begins(0, end, with: "ERROR ") {
            return .reply(Reply(length: length, outcome: .error))
        }
        switch expecting {
        case .lookup:
            if bytes.begins(0, end, with: "VALUE ") { return .reply(Reply(length: length, outcome: .done, hits: 1)) }
            if bytes.begins(0, end, with: "NOTFOUND ") { return .reply(Reply(length: length, outcome: .notFound)) }
        case .multiLookup:
            return parseLines(bytes)
        case .write:
            if bytes.equals(0, end, "STORED") { return .reply(Reply(length: length, outcome: .done)) }
        case .batchWrite:
            if bytes.begins(0, end, with: "STORED "), bytes.decimal(7, end) != nil {
                return .reply(Reply(length: length, outcome: .done))
            }
        case .update:
            if bytes.equals(0, end, "UPDATED") { return .reply(Reply(length: length, outcome: .done)) }
            if bytes.begins(0, end, with: "NOTFOUND ") { return .reply(Reply(length: length, outcome: .notFound)) }
        case .delete:
            if bytes.equals(0, end, "DELETED") { return .reply(Reply(length: length, outcome: .done)) }
            if bytes.begins(0, end, with: "NOTFOUND ") { return .reply(Reply(length: length, outcome: .notFound)) }
        case .exists:
            if bytes.equals(0, end, "YES") { return .reply(Reply(length: length, outcome: .done, hits: 1)) }
            if bytes.equals(0, end, "NO") { return .reply(Reply(length: length, outcome: .notFound)) }
        case .auth:
            if bytes.equals(0, end, "OK") { return .reply(Reply(length: length, outcome: .done)) }
        case .count:
            if bytes.begins(0, end, with: "COUNT "), bytes.decimal(6, end) != nil {
                return .reply(Reply(length: length, outcome: .done))
            }
        case .listing:
            return parseListing(bytes)
        case .fields:
            break
        }
        return .garbage("unexpected reply to \(expecting): \(visible(bytes))")
    }

    /// `VALUE` or `STAT` lines up to `END`.
    private static func parseListing(_ bytes: UnsafeRawBufferPointer) -> ParseResult {
        var start = 0
        while true {
            guard let lf = bytes.lineFeed(from: start) else { return waitForLine(bytes, from: start) }
            let end = bytes.contentEnd(start, lf: lf)
            if bytes.equals(start, end, "END") { return .reply(Reply(length: lf + 1, outcome: .done)) }
            guard bytes.begins(start, end, with: "VALUE ") || bytes.begins(start, end, with: "STAT ") else {
                return .garbage("unexpected line in a listing: \(visible(bytes, from: start))")
            }
            start = lf + 1
        }
    }

    /// `VALUE` and `NOTFOUND` lines up to `END`.
    private static func parseLines(_ bytes: UnsafeRawBufferPointer) -> ParseResult {
        var start = 0
        var hits = 0
        while true {
            guard let lf = bytes.lineFeed(from: start) else { return waitForLine(bytes, from: start) }
            let end = bytes.contentEnd(start, lf: lf)
            if bytes.begins(start, end, with: "VALUE ") {
                hits += 1
            } else if bytes.equals(start, end, "END") {
                return .reply(Reply(length: lf + 1, outcome: .done, hits: hits))
            } else if !bytes.begins(start, end, with: "NOTFOUND ") {
                return .garbage("unexpected line in an MGET reply: \(visible(bytes, from: start))")
            }
            start = lf + 1
        }
    }
}
