/// Replies of a RESP server to the hash workload (`resp://`), where each profile is a hash with
/// the fields `name` and `portraitUri`: HGETALL's flat array of field and value bulk strings
/// (empty when the key does not exist), HMGET's array of two with a null for each absent field,
/// integers for HSET, DEL and EXISTS, `+OK` for AUTH, and `-` errors for anything. RESP2, read
/// by `RESPReplyParser.scan`.
///
/// No command reads several hashes at once, so the warming read (`.multiLookup`) is one HGETALL
/// per id, read like a lookup.
public enum RESPHashReplyParser: ReplyParser {
    public static func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult {
        let element: RESPReplyParser.Element
        if let array = RESPReplyParser.bulkStringArray(bytes) {
            element = RESPReplyParser.Element(kind: .array(count: array.count, found: array.found), end: array.end)
        } else {
            switch RESPReplyParser.scan(bytes, at: 0, depth: 0) {
            case .incomplete: return .incomplete
            case .garbage(let message): return .garbage(message)
            case .element(let e): element = e
            }
        }
        let length = element.end
        switch (expecting, element.kind) {
        case (_, .error):
            return .reply(Reply(length: length, outcome: .error))
        case (.lookup, .array(let count, let found)), (.multiLookup, .array(let count, let found)):
            // Field, value, field, value ...: every element a bulk string, in pairs.
            guard count % 2 == 0, found == count else {
                return .garbage("HGETALL answered an array that is not field and value pairs: \(visible(bytes))")
            }
            return .reply(Reply(length: length, outcome: count == 0 ? .notFound : .done, hits: count == 0 ? 0 : 1))
        case (.fields, .array(let count, let found)):
            guard count == 2 else {
                return .garbage("HMGET of 2 fields answered \(count) elements: \(visible(bytes))")
            }
            return .reply(Reply(length: length, outcome: found == 0 ? .notFound : .done, hits: found == 0 ? 0 : 1))
        case (.write, .integer(let n)), (.batchWrite, .integer(let n)), (.update, .integer(let n)):
            // HSET's count of fields that were absent: 0 when every field was there already.
            if n >= 0 { return .reply(Reply(length: length, outcome: .done)) }
        case (.delete, .integer(let n)):
            return .reply(Reply(length: length, outcome: n > 0 ? .done : .notFound))
        case (.exists, .integer(let n)):
            return .reply(Reply(length: length, outcome: n > 0 ? .done : .notFound, hits: n > 0 ? 1 : 0))
        case (.auth, .simple(let isOK)):
            if isOK { return .reply(Reply(length: length, outcome: .done)) }
        default:
            break
        }
        return .garbage("unexpected reply to \(expecting): \(visible(bytes))")
    }
}
