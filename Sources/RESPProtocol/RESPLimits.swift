import WireBytes
/// How much one request may hold. `RESPDecoder` checks each limit as soon as the count or
/// length it limits has arrived, before it waits for (and the caller buffers) the bytes.
///
/// A plain value; any thread may use it.
public struct RESPLimits: Equatable, Sendable {
    /// Most arguments in one request, the command name included. Redis caps a multibulk
    /// count at INT_MAX with `invalid multibulk length`; past this smaller cap a multibulk
    /// gets the same error, and an inline request `too big inline request`.
    public var maxArguments: Int
    /// Most bytes in one bulk string, Redis's `proto-max-bulk-len`: past it,
    /// `invalid bulk length`.
    public var maxBulkBytes: Int
    /// Redis's PROTO_INLINE_MAX_SIZE. An inline request may hold this many bytes before its LF;
    /// a multibulk's count line and each bulk length line this many before their CR. Once
    /// more have arrived without that end, the reply is `too big inline request`
    /// (`too big mbulk count string`, `too big bulk count string`).
    public var maxInlineBytes: Int
    /// Most bulk payload bytes in one multibulk request, all its bulk strings together; past
    /// it, `too big request`. Redis has no such limit (a request may announce 4 GiB of
    /// arguments); this one bounds what one connection can make the server hold.
    public var maxRequestPayloadBytes: Int
    /// Most arguments in a multibulk request on a connection that has not authenticated.
    public var unauthenticatedMaxArguments: Int
    /// Most bytes in one bulk string on a connection that has not authenticated.
    public var unauthenticatedMaxBulkBytes: Int

    /// The limits of the RESP front; the unauthenticated ones are Redis's own.
    public init(
        maxArguments: Int = 1024, maxBulkBytes: Int = 65536, maxInlineBytes: Int = 65536,
        maxRequestPayloadBytes: Int = 1 << 20,
        unauthenticatedMaxArguments: Int = 10, unauthenticatedMaxBulkBytes: Int = 16384
    ) {
        self.maxArguments = maxArguments
        self.maxBulkBytes = maxBulkBytes
        self.maxInlineBytes = maxInlineBytes
        self.maxRequestPayloadBytes = maxRequestPayloadBytes
        self.unauthenticatedMaxArguments = unauthenticatedMaxArguments
        self.unauthenticatedMaxBulkBytes = unauthenticatedMaxBulkBytes
    }

    /// A receive buffer this large never waits in vain: once it holds this many
    /// unconsumed bytes, `RESPDecoder.decode` answers something other than `.needMore`.
    ///
    /// It is the most the largest multibulk request may take (its count line, each argument's
    /// length line and CR LF, and the payload), plus a line of `maxInlineBytes` and the byte
    /// that makes it too long, plus one.
    public var receiveBufferBytes: Int {
        let countLine = 3 + decimalCount(UInt64(maxArguments))
        let lengthLine = 3 + decimalCount(UInt64(maxBulkBytes))
        return countLine + maxArguments * (lengthLine + 2) + maxRequestPayloadBytes + maxInlineBytes + 2
    }
}
