/// Why the store failed: what kind of failure, the store's own code and message for it, the
/// statement being run and where the store is, printable as one sentence.
///
/// Threading: a plain value; any thread.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    /// What a caller may do about it.
    public enum Kind: Sendable, Equatable {
        /// Still locked after the busy timeout (SQLITE_BUSY, SQLITE_LOCKED).
        case busy
        /// The disk or the database is full (SQLITE_FULL).
        case full
        /// The operating system reported an I/O error (SQLITE_IOERR_*).
        case io
        /// The file is damaged or truncated (SQLITE_CORRUPT).
        case corrupt
        /// Not an SQLite file, or an SQLite file of another application.
        case notADatabase
        /// Written by a newer profiled whose schema this build does not know.
        case newerSchema
        /// Another process (or another store object) holds the file.
        case locked
        /// Abandoned at the caller's request (SQLITE_INTERRUPT); nothing was changed.
        case interrupted
        /// A shared store's server could not be reached, or broke off; nothing was changed.
        case unreachable
        /// A shared store's commit may or may not have happened: the connection broke during
        /// COMMIT and the outcome could not be found out in time.
        case outcomeUnknown
        /// Anything else.
        case other
    }

    public var kind: Kind
    /// The store's own code for the failure, with what it is (`SQLite code 13`); nil when
    /// the store has none.
    public var code: String?
    /// The store's message, or what the store module found.
    public var message: String
    /// The statement that failed, when there is one.
    public var sql: String?
    /// Where the store is: its file, or its server.
    public var path: String
    /// A reason for clients when the kind's own would say too little; never a path.
    private var clientReason: String?

    public init(kind: Kind, code: String? = nil, message: String, sql: String? = nil, path: String,
                clientReason: String? = nil) {
        self.kind = kind
        self.code = code
        self.message = message
        self.sql = sql
        self.path = path
        self.clientReason = clientReason
    }

    /// Why, for a client: one phrase with the store's code, naming no file of the server (the
    /// server's log gets `description`, which does).
    public var reason: String {
        if let clientReason { return clientReason }
        let phrase = switch kind {
        case .busy: "the store stayed locked past the busy timeout"
        case .full: "the disk is full"
        case .io: "reading or writing the store failed"
        case .corrupt: "the store is damaged"
        case .notADatabase: "the store is not a profiled database"
        case .newerSchema: "the store was written by a newer profiled"
        case .locked: "the store is in use by another process"
        case .interrupted: "the work was abandoned before it changed anything"
        case .unreachable: "the shared store cannot be reached"
        case .outcomeUnknown: "outcome unknown"
        case .other: "the store failed"
        }
        return code.map { "\(phrase) (\($0))" } ?? phrase
    }

    /// One phrase for the operator (lower case, no closing period, as profiled's other
    /// messages): the path, what happened, the store's message and code, and the head of the
    /// statement that failed (a batch's statement runs to hundreds of placeholders).
    public var description: String {
        let cause = code.map { "\(message) (\($0))" } ?? message
        let statement = sql.map { " while running \(Self.head(ofStatement: $0))" } ?? ""
        switch kind {
        case .locked:
            return "\(path) is in use by another process (is profiled running?)"
        case .notADatabase:
            return "\(path) is not a profiled database: \(message)"
        case .newerSchema:
            return "\(path) was written by a newer profiled: \(message)"
        case .corrupt:
            return "\(path) is damaged or truncated: \(cause)\(statement)"
        case .busy:
            return "\(path) stayed locked past the busy timeout: \(cause)\(statement)"
        case .full:
            return "the disk or database at \(path) is full: \(cause)\(statement)"
        case .io:
            return "reading or writing \(path) failed: \(cause)\(statement)"
        case .interrupted:
            return "work on \(path) was abandoned before it changed anything: \(cause)\(statement)"
        case .unreachable, .outcomeUnknown:
            return message
        case .other:
            return "the store at \(path) failed: \(cause)\(statement)"
        }
    }

    /// A statement's first words, up to its column or value list or its clauses (at most six):
    /// `INSERT INTO profiles`, `DELETE FROM profiles`.
    public static func head(ofStatement sql: String) -> String {
        var words: [Substring] = []
        for word in sql.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" }) {
            if word.hasPrefix("(") || ["VALUES", "WHERE", "SET"].contains(word.uppercased()) || words.count == 6 { break }
            words.append(word.hasSuffix(";") ? word.dropLast() : word)
        }
        return words.joined(separator: " ")
    }
}
