import Glibc
import ProfilePostgres
import ProfileSystem
import ProfileTestSupport
import Testing

/// An absolute deadline `milliseconds` from now, as the connection's calls take it.
func deadline(_ milliseconds: Int) -> Int {
    monotonicNanos() + milliseconds * 1_000_000
}

/// Milliseconds since `start`, a `monotonicNanos()` value.
func millisecondsSince(_ start: Int) -> Int {
    (monotonicNanos() - start) / 1_000_000
}

/// A connection to the throw-away server (or to `conninfo`), opened within 5 s.
func connect(_ conninfo: String? = nil, applicationName: String = "profiled test") throws -> PostgresConnection {
    try PostgresConnection(conninfo: conninfo ?? testPostgresConninfo(), applicationName: applicationName,
                           deadline: deadline(5000))
}

/// The PostgresError `body` throws, or nil when it returns (or throws something else, which
/// is recorded as an issue).
func failure<R>(_ body: () throws -> R, sourceLocation: SourceLocation = #_sourceLocation) -> PostgresError? {
    do {
        _ = try body()
        return nil
    } catch let error as PostgresError {
        return error
    } catch {
        Issue.record("not a PostgresError: \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// A name no other test uses at the same time, for roles and channels (they are not per database).
func uniqueName(_ prefix: String) -> String {
    "\(prefix)_\(getpid())_\(String(UInt64.random(in: 0...UInt64.max), radix: 16))"
}

extension PostgresConnection {
    /// The first column of the first row, as text; nil for NULL.
    func text(_ sql: String, _ parameters: [[UInt8]?] = []) throws -> String? {
        let result = try query(sql, parameters, deadline: deadline(5000))
        guard result.rowCount > 0 else { throw TestFailure("no row from \(sql)") }
        return result.string(0, 0)
    }
}

/// Text as the bytes of a parameter.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
