import Glibc
import ProfileModel
import Synchronization

/// A tokens file that could not be used: the file name, the line (0 when none applies) and why.
/// A plain value; any thread may use it.
public struct TokensFileError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var line: Int
    public var reason: String
    public var description: String {
        line > 0 ? "\(path):\(line): \(reason)" : "\(path): \(reason)"
    }
}

/// The tokens a server accepts, each with its role.
///
/// Immutable once parsed: any thread may use it.
public struct TokenTable: Sendable {
    package struct Entry: Sendable {
        package var token: [UInt8]
        package var role: Role
    }
    package let entries: [Entry]
    /// Roles of TLS clients by the common name of their verified certificate's subject.
    package let certificateRoles: [String: Role]

    public var count: Int { entries.count + certificateRoles.count }

    /// Parses `<role> <token>` and `<role> cert-cn <common name>` lines: blanks separate, `#`
    /// lines and blank lines are ignored.
    ///
    /// - Throws: `TokensFileError` for an unreadable file, an unknown role, a malformed line,
    ///   a token or name listed twice (at its second line) or a file with neither.
    public static func load(path: String) throws(TokensFileError) -> TokenTable {
        guard let bytes = readWholeFile(path) else {
            throw TokensFileError(path: path, line: 0, reason: "cannot read the tokens file (\(String(cString: strerror(errno))))")
        }
        return try parse(bytes, path: path)
    }

    package static func parse(_ bytes: [UInt8], path: String) throws(TokensFileError) -> TokenTable {
        var entries: [Entry] = []
        var certificateRoles: [String: Role] = [:]
        var lineNumber = 0
        for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = rawLine[...]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            let fields = line.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 })
            if fields.isEmpty || fields[0].first == UInt8(ascii: "#") { continue }
            let isCertificate = fields.count == 3 && fields[1].elementsEqual("cert-cn".utf8)
            // A certificate line that lost its name would otherwise read as the token "cert-cn".
            guard fields.count == 2 && !fields[1].elementsEqual("cert-cn".utf8) || isCertificate else {
                throw TokensFileError(path: path, line: lineNumber, reason: "expected '<role> <token>' or '<role> cert-cn <name>'")
            }
            guard let role = Role(name: Array(fields[0])), role != .none else {
                throw TokensFileError(path: path, line: lineNumber,
                                      reason: "unknown role '\(String(decoding: fields[0], as: UTF8.self))' (read, write or admin)")
            }
            if isCertificate {
                let name = String(decoding: fields[2], as: UTF8.self)
                guard certificateRoles.updateValue(role, forKey: name) == nil else {
                    throw TokensFileError(path: path, line: lineNumber, reason: "certificate name listed twice")
                }
                continue
            }
            let token = Array(fields[1])
            if entries.contains(where: { $0.token == token }) {
                throw TokensFileError(path: path, line: lineNumber, reason: "token listed twice")
            }
            entries.append(Entry(token: token, role: role))
        }
        guard !entries.isEmpty || !certificateRoles.isEmpty else {
            throw TokensFileError(path: path, line: 0, reason: "the tokens file holds no tokens")
        }
        return TokenTable(entries: entries, certificateRoles: certificateRoles)
    }

    /// The role of `token`, comparing every entry in time that does not depend on where bytes differ.
    package func role(of token: UnsafeRawBufferPointer) -> Role? {
        var found: Role? = nil
        for entry in entries {
            guard entry.token.count == token.count else { continue }
            var difference: UInt8 = 0
            entry.token.withUnsafeBytes { mine in
                for i in 0..<mine.count { difference |= mine[i] ^ token[i] }
            }
            if difference == 0 { found = entry.role }
        }
        return found
    }
}

/// The tokens in force, replaceable at run time (SIGHUP reload).
///
/// Thread-safe: any thread may read or replace it.
public final class TokenRegistry: Sendable {
    private let current: Mutex<TokenTable?>

    public init(_ table: TokenTable?) { current = Mutex(table) }

    /// Whether tokens are configured at all; without them every connection is admin.
    public var isEnabled: Bool { current.withLock { $0 != nil } }

    public func replace(with table: TokenTable) { current.withLock { $0 = table } }

    package func role(of token: UnsafeRawBufferPointer) -> Role? {
        current.withLock { $0?.role(of: token) }
    }

    /// The role the tokens file gives a TLS client whose verified certificate has this common name.
    package func role(ofCertificateName name: String) -> Role? {
        current.withLock { $0?.certificateRoles[name] }
    }
}

/// Reads a whole file; nil with errno set when it cannot.
package func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            return nil
        }
        if n == 0 { return result }
        result.append(contentsOf: chunk[0..<n])
    }
}
