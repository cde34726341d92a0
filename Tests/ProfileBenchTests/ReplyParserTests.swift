import ProfileTestSupport
import Testing
@testable import ProfileBench

/// Feeds `stream` to a parser `chunk` bytes at a time, parsing every whole reply as soon as
/// it is there, as the load loop does; returns the replies (or the first garbage) in order.
func parseInChunks<P: ReplyParser>(_ parser: P.Type, _ stream: String, expecting: [ExpectedReply], chunk: Int) -> [ParseResult] {
    let bytes = Array(stream.utf8)
    var buffer: [UInt8] = []
    var results: [ParseResult] = []
    var fed = 0
    while fed < bytes.count {
        let next = min(bytes.count, fed + chunk)
        buffer += bytes[fed..<next]
        fed = next
        while results.count < expecting.count {
            let result = buffer.withUnsafeBytes { P.parse($0, expecting: expecting[results.count]) }
            if result == .incomplete { break }
            results.append(result)
            guard case .reply(let reply) = result else { return results }
            buffer.removeFirst(reply.length)
        }
    }
    #expect(buffer.isEmpty, "bytes left over: \(buffer.count)")
    return results
}

/// Parses the stream at every chunk size from 1 byte to all of it; every size must agree.
func expectReplies<P: ReplyParser>(_ parser: P.Type, _ stream: String, _ expected: [(ExpectedReply, Reply.Outcome, hits: Int)],
                                   sourceLocation: SourceLocation = #_sourceLocation) {
    let lengths = Array(stream.utf8).count
    for chunk in 1...lengths {
        let results = parseInChunks(parser, stream, expecting: expected.map(\.0), chunk: chunk)
        let outcomes = results.map { result -> String in
            guard case .reply(let reply) = result else { return "\(result)" }
            return "\(reply.outcome)/\(reply.hits)"
        }
        #expect(outcomes == expected.map { "\($0.1)/\($0.hits)" }, "chunk size \(chunk)", sourceLocation: sourceLocation)
    }
}

/// The garbage message for a stream, after feeding it whole.
func garbage<P: ReplyParser>(_ parser: P.Type, _ stream: String, expecting: ExpectedReply) -> String? {
    let bytes = Array(stream.utf8)
    let result = bytes.withUnsafeBytes { P.parse($0, expecting: expecting) }
    guard case .garbage(let message) = result else { return nil }
    return message
}

@Suite("Reply parsers")
struct ReplyParserTests {
    @Test func profiledRepliesAtEveryChunkSize() {
        let stream = "VALUE u00000001 Ann https://x/1.png\n"
            + "NOTFOUND x00000002\n"
            + "VALUE u1 \"A b\" u\nNOTFOUND x1\nVALUE u2 c d\nEND\n"
            + "END\n"
            + "STORED\n"
            + "STORED 500\r\n"
            + "UPDATED\n"
            + "NOTFOUND u3\n"
            + "DELETED\n"
            + "YES\n"
            + "NO\n"
            + "OK\n"
            + "ERROR TOOLARGE userId too long\n"
            + "ERROR PARSE bad\n"
            + "COUNT 1000000\n"
            + "STAT uptime_seconds 3\nSTAT errors 0\nEND\n"
            + "VALUE u1 a b\nVALUE u2 \"c d\" e\nEND\n"
            + "END\n"
        expectReplies(ProfiledReplyParser.self, stream, [
            (.lookup, .done, 1), (.lookup, .notFound, 0), (.multiLookup, .done, 2), (.multiLookup, .done, 0),
            (.write, .done, 0), (.batchWrite, .done, 0), (.update, .done, 0), (.delete, .notFound, 0),
            (.delete, .done, 0), (.exists, .done, 1), (.exists, .notFound, 0), (.auth, .done, 0),
            (.lookup, .error, 0), (.multiLookup, .error, 0), (.count, .done, 0), (.listing, .done, 0),
            (.listing, .done, 0), (.listing, .done, 0),
        ])
    }

    @Test func profiledGarbageIsShown() {
        #expect(garbage(ProfiledReplyParser.self, "HTTP/1.1 400 Bad\r\n", expecting: .lookup)
                == "unexpected reply to lookup: \"HTTP/1.1 400 Bad\\r\\n\"")
        #expect(garbage(ProfiledReplyParser.self, "VALUE a b c\nSTORED\n", expecting: .multiLookup)
                == "unexpected line in an MGET reply: \"STORED\\n\"")
        #expect(garbage(ProfiledReplyParser.self, "STORED x\n", expecting: .batchWrite) != nil)
        #expect(garbage(ProfiledReplyParser.self, "YES\n", expecting: .write) != nil)
        let endless = String(repeating: "V", count: (1 << 20) + 1)
        #expect(garbage(ProfiledReplyParser.self, endless, expecting: .lookup)?.hasPrefix("no line end in 1048576 bytes") == true)
    }

    @Test func memcachedRepliesAtEveryChunkSize() {
        let stream = "VALUE u00000001 0 5\r\nhello\r\nEND\r\n"
            + "END\r\n"
            + "VALUE u1 0 3\r\nEND\r\nVALUE u2 7 0 99\r\n\r\nEND\r\n"
            + "STORED\r\n"
            + "NOT_STORED\r\n"
            + "DELETED\r\n"
            + "NOT_FOUND\r\n"
            + "SERVER_ERROR out of memory storing object\r\n"
            + "CLIENT_ERROR bad data chunk\r\n"
            + "ERROR\r\n"
        expectReplies(MemcachedReplyParser.self, stream, [
            (.lookup, .done, 1), (.lookup, .notFound, 0), (.multiLookup, .done, 2),
            (.write, .done, 0), (.batchWrite, .error, 0), (.delete, .done, 0), (.delete, .notFound, 0),
            (.write, .error, 0), (.multiLookup, .error, 0), (.lookup, .error, 0),
        ])
    }

    @Test func memcachedGarbageIsShown() {
        #expect(garbage(MemcachedReplyParser.self, "VALUE k 0 3\r\nabcdEND\r\n", expecting: .lookup)
                == "a value's data does not end in CR LF after 3 bytes: \"VALUE k 0 3\\r\\nabcdEND\\r\\n\"")
        #expect(garbage(MemcachedReplyParser.self, "VALUE k zero\r\n", expecting: .lookup) != nil)
        #expect(garbage(MemcachedReplyParser.self, "+OK\r\n", expecting: .write) == "unexpected reply to write: \"+OK\\r\\n\"")
    }

    @Test func respRepliesAtEveryChunkSize() {
        let stream = "$5\r\nhello\r\n"
            + "$-1\r\n"
            + "*3\r\n$2\r\nab\r\n$-1\r\n$0\r\n\r\n"
            + "*0\r\n"
            + "+OK\r\n"
            + "+OK\r\n"
            + ":1\r\n"
            + ":0\r\n"
            + ":2\r\n"
            + "-ERR wrong number of arguments\r\n"
            + "-WRONGTYPE Operation against a key\r\n"
            + "_\r\n"
        expectReplies(RESPReplyParser.self, stream, [
            (.lookup, .done, 1), (.lookup, .notFound, 0), (.multiLookup, .done, 2), (.multiLookup, .done, 0),
            (.write, .done, 0), (.batchWrite, .done, 0), (.delete, .done, 0), (.exists, .notFound, 0),
            (.exists, .done, 1), (.lookup, .error, 0), (.multiLookup, .error, 0), (.lookup, .notFound, 0),
        ])
    }

    @Test func respGarbageIsShown() {
        #expect(garbage(RESPReplyParser.self, "hello\r\n", expecting: .lookup) == "not a RESP reply: \"hello\\r\\n\"")
        #expect(garbage(RESPReplyParser.self, "$3\r\nabcd\r\n", expecting: .lookup)
                == "a bulk string does not end in CR LF after 3 bytes: \"$3\\r\\nabcd\\r\\n\"")
        #expect(garbage(RESPReplyParser.self, "+OK\n", expecting: .write) == "a RESP line does not end in CR LF: \"+OK\\n\"")
        #expect(garbage(RESPReplyParser.self, "+QUEUED\r\n", expecting: .write) == "unexpected reply to write: \"+QUEUED\\r\\n\"")
        #expect(garbage(RESPReplyParser.self, "$x\r\n", expecting: .lookup) != nil)
        #expect(garbage(RESPReplyParser.self, ":1\r\n", expecting: .lookup) != nil)
    }

    @Test func respHashRepliesAtEveryChunkSize() {
        let stream = "*4\r\n$4\r\nname\r\n$2\r\nNa\r\n$11\r\nportraitUri\r\n$8\r\nhttps://\r\n"
            + "*0\r\n"
            + "*2\r\n$4\r\nname\r\n$2\r\nNa\r\n"
            + "*0\r\n"
            + "*2\r\n$2\r\nNa\r\n$-1\r\n"
            + "*2\r\n$-1\r\n$-1\r\n"
            + ":2\r\n"
            + ":0\r\n"
            + ":1\r\n"
            + ":0\r\n"
            + ":1\r\n"
            + ":0\r\n"
            + ":1\r\n"
            + ":0\r\n"
            + "+OK\r\n"
            + "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
            + "-ERR unknown profile field 'nick' (fields are name and portraitUri)\r\n"
            + "-NOAUTH Authentication required.\r\n"
            + "-STORE disk I/O error\r\n"
        expectReplies(RESPHashReplyParser.self, stream, [
            (.lookup, .done, 1), (.lookup, .notFound, 0), (.multiLookup, .done, 1), (.multiLookup, .notFound, 0),
            (.fields, .done, 1), (.fields, .notFound, 0), (.write, .done, 0), (.write, .done, 0),
            (.batchWrite, .done, 0), (.update, .done, 0), (.delete, .done, 0), (.delete, .notFound, 0),
            (.exists, .done, 1), (.exists, .notFound, 0), (.auth, .done, 0), (.lookup, .error, 0),
            (.write, .error, 0), (.fields, .error, 0), (.batchWrite, .error, 0),
        ])
    }

    /// The one-pass reading of arrays of bulk strings agrees with the general scan on every
    /// prefix of every reply it reads, and leaves everything else to it.
    @Test func arraysOfBulkStringsReadInOnePassAsTheGeneralScanReadsThem() {
        let replies = ["*4\r\n$4\r\nname\r\n$2\r\nNa\r\n$11\r\nportraitUri\r\n$0\r\n\r\n", "*0\r\n",
                       "*2\r\n$-1\r\n$3\r\nabc\r\n", "*1\r\n$12\r\nline\r\nbreaks\r\n"]
        for reply in replies {
            let bytes = Array(reply.utf8)
            for end in 1...bytes.count {
                bytes[..<end].withUnsafeBytes { prefix in
                    let fast = RESPReplyParser.bulkStringArray(prefix)
                    guard case .element(let element) = RESPReplyParser.scan(prefix, at: 0, depth: 0) else {
                        #expect(fast == nil, "\(reply) up to \(end)")
                        return
                    }
                    guard case .array(let count, let found) = element.kind, let fast else {
                        Issue.record("\(reply) up to \(end): not read in one pass")
                        return
                    }
                    #expect(fast.count == count && fast.found == found && fast.end == element.end, "\(reply) up to \(end)")
                }
            }
        }
        for other in ["*-1\r\n", "*1\r\n:1\r\n", "*1\r\n*0\r\n", "*1\r\n$-2\r\n", "*1\r\n$3\r\nabcd\r\n",
                      "*1\r\n$x\r\n", "*1\n$1\r\na\r\n", "$1\r\na\r\n", "*1\r\n$1234567890123456789\r\n"] {
            #expect(Array(other.utf8).withUnsafeBytes { RESPReplyParser.bulkStringArray($0) } == nil, "\(other)")
        }
    }

    @Test func respHashGarbageIsShown() {
        #expect(garbage(RESPHashReplyParser.self, "*1\r\n$4\r\nname\r\n", expecting: .lookup)
                == "HGETALL answered an array that is not field and value pairs: \"*1\\r\\n$4\\r\\nname\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "*2\r\n$4\r\nname\r\n$-1\r\n", expecting: .multiLookup)
                == "HGETALL answered an array that is not field and value pairs: \"*2\\r\\n$4\\r\\nname\\r\\n$-1\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "*3\r\n$-1\r\n$-1\r\n$-1\r\n", expecting: .fields)
                == "HMGET of 2 fields answered 3 elements: \"*3\\r\\n$-1\\r\\n$-1\\r\\n$-1\\r\\n\"")
        // A string workload's replies are not the hash workload's.
        #expect(garbage(RESPHashReplyParser.self, "$5\r\nhello\r\n", expecting: .lookup)
                == "unexpected reply to lookup: \"$5\\r\\nhello\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "+OK\r\n", expecting: .write) == "unexpected reply to write: \"+OK\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, ":-1\r\n", expecting: .update) == "unexpected reply to update: \":-1\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "*0\r\n", expecting: .exists) == "unexpected reply to exists: \"*0\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "+PONG\r\n", expecting: .auth) == "unexpected reply to auth: \"+PONG\\r\\n\"")
        #expect(garbage(RESPHashReplyParser.self, "*2\r\n$-1\r\n", expecting: .fields) == nil, "an array still arriving")
    }
}
