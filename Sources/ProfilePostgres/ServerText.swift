import CPostgres

// libpq's own messages may quote the connection string, password included: a parse error can
// echo a whole URI. These turn what libpq says into text that names the server and never
// carries a credential.

/// Why libpq cannot parse `conninfo`, with every quoted fragment of its message blanked out;
/// nil when it parses, or when it is a plain database name rather than a connection string.
func connectionStringProblem(_ conninfo: String) -> String? {
    // libpq's rule for expanding a dbname: a URI, or anything with an "=".
    guard conninfo.hasPrefix("postgresql://") || conninfo.hasPrefix("postgres://") || conninfo.contains("=")
    else { return nil }
    var error: UnsafeMutablePointer<CChar>?
    guard let options = PQconninfoParse(conninfo, &error) else {
        defer { PQfreemem(error) }
        guard let error else { return "libpq ran out of memory parsing it" }
        return phrase(blankingQuotedFragments(String(cString: error)))
    }
    PQconninfoFree(options)
    return nil
}

/// `text` with the inside of each double-quoted fragment replaced by "…", except a single
/// punctuation mark (libpq quotes the "=" or "]" it expected): the fragments are what libpq
/// echoes of the connection string, which may be the password.
func blankingQuotedFragments(_ text: String) -> String {
    var result = ""
    var rest = Substring(text)
    while let open = rest.firstIndex(of: "\"") {
        result += rest[...open]
        let afterOpen = rest.index(after: open)
        guard let close = rest[afterOpen...].firstIndex(of: "\"") else {
            result += "…"
            return result
        }
        let inside = rest[afterOpen..<close]
        let isPunctuation = inside.count == 1 && !inside.first!.isLetter && !inside.first!.isNumber
        result += isPunctuation ? inside : "…"
        result += "\""
        rest = rest[rest.index(after: close)...]
    }
    return result + rest
}

/// The server a connection goes (or went) to, as libpq resolved it after its defaults and
/// environment: `127.0.0.1:5432 (database profiles, user profiled)`, or
/// `socket /run/postgresql/.s.PGSQL.5432 (...)`.
func serverName(_ connection: OpaquePointer) -> String {
    func text(_ value: UnsafeMutablePointer<CChar>?) -> String { value.map { String(cString: $0) } ?? "" }
    let host = text(PQhost(connection))
    let port = text(PQport(connection))
    let address: String
    if host.hasPrefix("/") || host.hasPrefix("@") {
        address = "socket \(host)/.s.PGSQL.\(port.isEmpty ? "5432" : port)"
    } else {
        let bracketed = host.contains(":") ? "[\(host)]" : host
        address = port.isEmpty ? bracketed : "\(bracketed):\(port)"
    }
    return "\(address) (database \(text(PQdb(connection))), user \(text(PQuser(connection))))"
}

/// The reason in libpq's message about a failed connection attempt, without the prefix that
/// names the server (the error names it its own way), the severity, or the hint lines.
///
/// libpq writes one line per address it tried, `connection to server at "HOST", port PORT
/// failed: REASON`, each followed by tab-indented hints; the last attempt's reason is kept.
func connectFailureReason(_ message: String) -> String {
    let lines = message.split(separator: "\n").filter { !$0.hasPrefix("\t") && !$0.allSatisfy(\.isWhitespace) }
    guard var line = lines.last(where: { $0.hasPrefix("connection to server") }) ?? lines.last else {
        return "the connection failed"
    }
    if line.hasPrefix("connection to server"), let failed = line.firstRange(of: " failed: ") {
        line = line[failed.upperBound...]
    }
    return phrase(String(line))
}

/// A message of libpq's or the server's as a phrase for a sentence: its first line, without a
/// severity prefix or a final period.
func phrase(_ message: String) -> String {
    var text = Substring(message.split(separator: "\n").first ?? "")
    for severity in ["FATAL:", "ERROR:", "PANIC:"] where text.hasPrefix(severity) {
        text = text.dropFirst(severity.count)
    }
    text = text.drop { $0.isWhitespace }
    while let last = text.last, last.isWhitespace || last == "." { text = text.dropLast() }
    return text.isEmpty ? "no reason given" : String(text)
}
