import CSQLite
import ProfileStore

extension StoreError {
    /// A failure SQLite reported, or one found beside it and given the closest result code:
    /// SQLITE_BUSY for `.locked`, SQLITE_NOTADB for a foreign file, SQLITE_ERROR for
    /// `.newerSchema`, SQLITE_CANTOPEN when a directory or the lock file cannot be made.
    init(kind: Kind, resultCode: Int32, message: String, sql: String? = nil, path: String, clientReason: String? = nil) {
        self.init(kind: kind, code: "SQLite code \(resultCode)", message: message, sql: sql, path: path,
                  clientReason: clientReason)
    }

    /// An error reported by SQLite, classified by its primary result code.
    init(resultCode: Int32, message: String, sql: String?, path: String) {
        self.init(kind: Self.kind(ofResultCode: resultCode), resultCode: resultCode, message: message, sql: sql, path: path)
    }

    static func kind(ofResultCode code: Int32) -> Kind {
        switch code & 0xff {
        case SQLITE_BUSY, SQLITE_LOCKED: .busy
        case SQLITE_FULL: .full
        case SQLITE_IOERR: .io
        case SQLITE_CORRUPT: .corrupt
        case SQLITE_NOTADB: .notADatabase
        case SQLITE_INTERRUPT: .interrupted
        default: .other
        }
    }
}
