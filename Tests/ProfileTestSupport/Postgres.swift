import Glibc

/// Whether a throw-away PostgreSQL is there to test against (`PROFILED_TEST_POSTGRES` is set).
/// The suites that need one are enabled by it, with `testPostgresAbsentReason` when they skip.
public var testPostgresIsConfigured: Bool {
    guard let value = getenv("PROFILED_TEST_POSTGRES") else { return false }
    return value.pointee != 0
}

/// Why a suite that needs PostgreSQL was skipped.
public let testPostgresAbsentReason =
    "no PostgreSQL to test against: PROFILED_TEST_POSTGRES is not set (Scripts/test starts a throw-away one and sets it)"

/// The connection string of the throw-away PostgreSQL that Scripts/test starts, from
/// `PROFILED_TEST_POSTGRES` (`host=DIR port=N user=NAME dbname=postgres`): its superuser, on
/// its socket.
public func testPostgresConninfo() throws -> String {
    guard let value = getenv("PROFILED_TEST_POSTGRES"), value.pointee != 0 else {
        throw TestFailure("PROFILED_TEST_POSTGRES is not set: Scripts/test starts a throwaway PostgreSQL and sets it")
    }
    return String(cString: value)
}

/// Creates an empty database that no other test uses in the throw-away PostgreSQL, and
/// returns a connection string for it. The databases go when the server's directory does.
public func makeTestDatabase() throws -> String {
    let conninfo = try testPostgresConninfo()
    let name = "profiled_test_\(getpid())_\(String(UInt64.random(in: 0...UInt64.max), radix: 16))"
    let psql = try postgresProgram("psql")
    let (status, output) = try runToCompletion(psql, ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo,
                                                      "-c", "CREATE DATABASE \(name)"])
    guard status == 0 else { throw TestFailure("psql could not create database \(name): \(output)") }
    // In a key=value connection string, a keyword given again overrides the earlier one.
    return conninfo + " dbname=" + name
}

/// Runs `sql` with psql against `conninfo` (tuples only, unaligned, `|` between columns) and
/// returns its output; throws with psql's message when it fails.
@discardableResult
public func psql(_ conninfo: String, _ sql: String) throws -> String {
    let (status, output) = try runToCompletion(try postgresProgram("psql"),
                                               ["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql])
    guard status == 0 else { throw TestFailure("psql failed (\(sql)): \(output)") }
    return output.trimmingCharacters(in: "\n")
}

extension String {
    fileprivate func trimmingCharacters(in set: Character) -> String {
        var text = Substring(self)
        while text.last == set { text = text.dropLast() }
        return String(text)
    }
}

/// A program of the newest PostgreSQL installed in Debian's layout,
/// /usr/lib/postgresql/VERSION/bin/NAME (where Scripts/postgres-for-tests finds the server).
public func postgresProgram(_ name: String) throws -> String {
    let root = "/usr/lib/postgresql"
    guard let directory = opendir(root) else { throw TestFailure("no PostgreSQL in \(root)") }
    defer { closedir(directory) }
    var newest: (version: [Int], path: String)?
    while let entry = readdir(directory) {
        let version = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        let numbers = version.split(separator: ".").compactMap { Int($0) }
        let path = "\(root)/\(version)/bin/\(name)"
        guard !numbers.isEmpty, access(path, X_OK) == 0 else { continue }
        if newest.map({ numbers.lexicographicallyPrecedes($0.version) == false }) ?? true {
            newest = (numbers, path)
        }
    }
    guard let newest else { throw TestFailure("no \(name) under \(root)/*/bin") }
    return newest.path
}
