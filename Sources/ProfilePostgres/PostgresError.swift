/// Why a PostgreSQL call failed, printable as one phrase (lower case, no closing period, as
/// profiled's other messages) that names the server (address, database, user) but never a
/// password.
///
/// Threading: a plain value; any thread.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// What a caller may conclude, and do.
    public enum Kind: Sendable, Hashable {
        /// The connection could not be opened: a connection string libpq cannot parse, a server
        /// that refuses or cannot be reached, credentials it rejects, or no answer before the
        /// deadline. Nothing was run.
        case connect
        /// The connection broke, or had broken before the call. A statement in flight may or may
        /// not have run, or committed; the connection is closed.
        case connectionLost
        /// The deadline passed while waiting for the server. The backend was asked to cancel the
        /// statement, which may or may not have run, or committed; the connection is closed.
        case timeout
        /// The server refused the statement with this SQLSTATE (`23505`, `40001`, ...). The
        /// connection is still usable; a transaction it was in is aborted.
        case server(sqlstate: String)
    }

    public var kind: Kind
    /// Why, in one phrase: the server's primary message (no detail, which may quote row values),
    /// or what this module or libpq found. Never a password.
    public var message: String
    /// The server as `host:port` or `socket PATH`, with database and user; empty when the
    /// connection string could not be parsed.
    public var server: String

    public init(kind: Kind, message: String, server: String) {
        self.kind = kind
        self.message = message
        self.server = server
    }

    /// The SQLSTATE of a `.server` error; nil for the other kinds.
    public var sqlstate: String? {
        if case .server(let sqlstate) = kind { return sqlstate }
        return nil
    }

    public var description: String {
        switch kind {
        case .connect where server.isEmpty:
            "the PostgreSQL connection string is not valid: \(message)"
        case .connect:
            "cannot connect to PostgreSQL at \(server): \(message)"
        case .connectionLost:
            "lost the connection to PostgreSQL at \(server): \(message)"
        case .timeout:
            "PostgreSQL at \(server) did not answer before the deadline: \(message)"
        case .server(let sqlstate):
            "PostgreSQL at \(server) refused the statement: \(message) (SQLSTATE \(sqlstate))"
        }
    }
}
