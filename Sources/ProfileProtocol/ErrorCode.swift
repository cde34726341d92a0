import WireBytes
/// The code of an `ERROR` reply; programs branch on it, people read the message.
///
/// A plain value; any thread may use it.
public enum ErrorCode: UInt8, Sendable, CaseIterable {
    /// Bad quoting, bad escape, invalid UTF-8, NUL, a stray CR.
    case parse
    /// A well-formed verb that is not a command.
    case unknown
    /// Wrong argument count, bad number, unknown or repeated field, empty userId.
    case args
    /// A value over its limit, or too many ids or triples.
    case tooLarge
    /// The request line is over the limit; the server closes the connection after the reply.
    case tooLong
    /// Tokens are configured and the connection has not authenticated.
    case noAuth
    /// Wrong token, or the command is beyond the connection's role.
    case denied
    /// The store failed; nothing was acknowledged.
    case store
    /// Too many connections; sent on accept, then the connection is closed.
    case busy

    /// The code as it appears on the wire, e.g. `TOOLARGE`.
    public var name: StaticString {
        switch self {
        case .parse: "PARSE"
        case .unknown: "UNKNOWN"
        case .args: "ARGS"
        case .tooLarge: "TOOLARGE"
        case .tooLong: "TOOLONG"
        case .noAuth: "NOAUTH"
        case .denied: "DENIED"
        case .store: "STORE"
        case .busy: "BUSY"
        }
    }

    /// Whether the server closes the connection after sending this error.
    public var closesConnection: Bool {
        self == .tooLong || self == .busy
    }

    /// Reads a code as written in an `ERROR` reply (exact, upper case); nil for anything else.
    public init?(name: some Collection<UInt8>) {
        for code in ErrorCode.allCases where bytesEqual(name, code.name) {
            self = code
            return
        }
        return nil
    }
}

