/// A request that breaks RESP's framing or a limit. The server sends `write(to:)`'s reply
/// and closes the connection, as Redis does.
///
/// The texts are Redis 7.2's, byte for byte (clients match on them), except
/// `tooBigRequest`, which answers a limit Redis does not have.
///
/// A plain value; any thread may use it.
public enum RESPProtocolError: Error, Equatable, Sendable {
    /// A count line that is not a number, or more arguments than allowed.
    case invalidMultibulkLength
    /// A length line that is not a number, is negative, or is over the bulk limit.
    case invalidBulkLength
    /// An inline request longer than allowed, or with more arguments than allowed.
    case tooBigInlineRequest
    /// An inline request with an unclosed quote, or a closing quote followed by neither a
    /// blank nor the end of the line.
    case unbalancedQuotes
    /// A bulk string's length line that does not start with `$`; the byte is the one found.
    case expectedDollar(got: UInt8)
    /// More arguments than a connection may send before it authenticates.
    case unauthenticatedMultibulkLength
    /// A bulk string longer than a connection may send before it authenticates.
    case unauthenticatedBulkLength
    /// A count line still without its CR after more bytes than an inline request may have.
    case tooBigMultibulkCountString
    /// A length line still without its CR after more bytes than an inline request may have.
    case tooBigBulkCountString
    /// A multibulk request whose bulk strings together are over `maxRequestPayloadBytes`.
    case tooBigRequest

    /// Bytes in the reply, `-ERR Protocol error: ...` and its CR LF.
    public var replyCount: Int {
        var builder = ReplyBuilder(nil)
        build(&builder)
        return builder.count
    }

    /// Writes the reply at `out`, which must have room for `replyCount` bytes.
    ///
    /// - Returns: The number of bytes written, `replyCount`.
    public func write(to out: UnsafeMutableRawPointer) -> Int {
        var builder = ReplyBuilder(out)
        build(&builder)
        return builder.count
    }

    private func build(_ reply: inout ReplyBuilder) {
        reply.put("-ERR Protocol error: ")
        switch self {
        case .invalidMultibulkLength: reply.put("invalid multibulk length")
        case .invalidBulkLength: reply.put("invalid bulk length")
        case .tooBigInlineRequest: reply.put("too big inline request")
        case .unbalancedQuotes: reply.put("unbalanced quotes in request")
        case .expectedDollar(let got):
            // Redis prints the byte with %c, as it is, and then turns CR and LF into spaces so
            // the reply stays one line. A NUL never gets here: see RESPDecoder's line search.
            reply.put("expected '$', got '")
            reply.put(got == ASCII.cr || got == ASCII.lf ? ASCII.space : got)
            reply.put("'")
        case .unauthenticatedMultibulkLength: reply.put("unauthenticated multibulk length")
        case .unauthenticatedBulkLength: reply.put("unauthenticated bulk length")
        case .tooBigMultibulkCountString: reply.put("too big mbulk count string")
        case .tooBigBulkCountString: reply.put("too big bulk count string")
        case .tooBigRequest: reply.put("too big request")
        }
        reply.put("\r\n")
    }
}
