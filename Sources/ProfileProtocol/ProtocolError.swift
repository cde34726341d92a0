import WireBytes
/// A protocol error: a code, and a short message for people.
///
/// A plain value; any thread may use it. Making one and writing its reply
/// allocate nothing: messages are `StaticString`s, and the one dynamic part, the
/// verb that UNKNOWN names, is kept inline.
public struct ProtocolError: Error, Sendable {
    public let code: ErrorCode
    /// The fixed part of the message. An UNKNOWN error's reply adds the verb
    /// after it: `unknown command 'FROB'`.
    public let message: StaticString

    /// UNKNOWN only: the first bytes of the verb, cut at a character boundary;
    /// a reply has no business echoing a 64 KiB token back.
    private let verbPrefix: InlineArray<32, UInt8>
    private let verbPrefixCount: UInt8
    private let verbTruncated: Bool
    private let namesVerb: Bool

    public init(_ code: ErrorCode, _ message: StaticString) {
        self.code = code
        self.message = message
        verbPrefix = InlineArray(repeating: 0)
        verbPrefixCount = 0
        verbTruncated = false
        namesVerb = false
    }

    /// An UNKNOWN error naming `verb`, which must be valid UTF-8.
    init(unknownVerb verb: UnsafeRawBufferPointer) {
        code = .unknown
        message = "unknown command"
        namesVerb = true
        var prefix = InlineArray<32, UInt8>(repeating: 0)
        var count = verb.count
        verbTruncated = count > prefix.count
        if verbTruncated {
            count = prefix.count
            while count > 0 && verb[count] & 0xC0 == 0x80 {  // don't split a character
                count -= 1
            }
        }
        for i in 0..<count {
            prefix[i] = verb[i]
        }
        verbPrefix = prefix
        verbPrefixCount = UInt8(count)
    }

    /// Bytes in the reply line `ERROR <CODE> <message>\n`.
    public var replyCount: Int {
        var count = 6 + code.name.utf8CodeUnitCount + 1 + message.utf8CodeUnitCount + 1
        if namesVerb {
            count += 3 + withVerbPrefix { ValueEncoder.encodedCount($0) } + (verbTruncated ? 3 : 0)
        }
        return count
    }

    /// Writes the reply line `ERROR <CODE> <message>\n` at `out`, which must have
    /// room for `replyCount` bytes.
    ///
    /// - Returns: The number of bytes written, `replyCount`.
    public func write(to out: UnsafeMutableRawPointer) -> Int {
        var n = copyBytes("ERROR ", to: out)
        n += copyBytes(code.name, to: out + n)
        n += copyBytes(" ", to: out + n)
        n += copyBytes(message, to: out + n)
        if namesVerb {
            n += copyBytes(" '", to: out + n)
            n += withVerbPrefix { ValueEncoder.write($0, to: out + n) }
            if verbTruncated {
                n += copyBytes("...", to: out + n)
            }
            n += copyBytes("'", to: out + n)
        }
        n += copyBytes("\n", to: out + n)
        return n
    }

    /// Appends the reply line, LF included; for paths where allocation is fine.
    public func appendReply(to bytes: inout [UInt8]) {
        appendWritten(count: replyCount, to: &bytes) { write(to: $0) }
    }

    private func withVerbPrefix<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        withUnsafeBytes(of: verbPrefix) { body(UnsafeRawBufferPointer(rebasing: $0[..<Int(verbPrefixCount)])) }
    }
}

extension ProtocolError: CustomStringConvertible {
    /// The reply line without its LF, e.g. `ERROR UNKNOWN unknown command 'FROB'`.
    public var description: String {
        var bytes: [UInt8] = []
        appendReply(to: &bytes)
        return String(decoding: bytes.dropLast(), as: UTF8.self)
    }
}

extension ProtocolError {
    /// TOOLONG: sent before the server closes the connection.
    public static var tooLong: ProtocolError { ProtocolError(.tooLong, "request line over the limit") }
    /// NOAUTH: tokens are configured and the connection has not authenticated.
    public static var noAuth: ProtocolError { ProtocolError(.noAuth, "authenticate with AUTH first") }
    /// DENIED for an AUTH whose token is not configured.
    public static var wrongToken: ProtocolError { ProtocolError(.denied, "wrong token") }
    /// DENIED for a command that needs more than the connection's role.
    public static var roleDenied: ProtocolError { ProtocolError(.denied, "command needs a higher role") }
    /// BUSY: sent on accept when the connection limit is reached.
    public static var busy: ProtocolError { ProtocolError(.busy, "too many connections") }
}
