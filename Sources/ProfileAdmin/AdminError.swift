/// A failure that ends a profilectl command, with the exit code it gets.
///
/// Threading: a plain value; any thread.
public enum AdminError: Error, CustomStringConvertible, Equatable, Sendable {
    /// Bad flags or arguments: one line, exit 64.
    case usage(String)
    /// A file, store or connection problem: exit 2.
    case file(String)
    /// The server answered `ERROR <code> <message>`: exit 1, or 2 during an import.
    case server(code: String, message: String)

    public var description: String {
        switch self {
        case .usage(let message), .file(let message): message
        case .server(let code, let message): "ERROR \(code) \(message)"
        }
    }
}
