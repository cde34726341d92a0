import CommandLineFlags
import Glibc
import ProfileServer
import ProfileStore
import ProfileTLS

let version = "profiled \(profiledVersion)"

let usage = """
usage: profiled [options]
  --config FILE            read options from FILE ('key = value' lines; flags given here win)
  --host HOST              TCP address to listen on (default 127.0.0.1)
  --port PORT|off          TCP port (default 7711; 0 picks a free one; off: no plain
                           line-protocol listener)
  --unix PATH              also listen on a Unix domain socket
  --resp-port PORT|off     also speak RESP (Redis clients) on this TCP port of --host
                           (default off; 0 picks a free one)
  --tls-port PORT|off      also speak the line protocol over TLS on this port (default off)
  --resp-tls-port PORT|off also speak RESP over TLS on this port (default off)
  --tls-cert-file FILE     the TLS listeners' certificate chain (PEM)
  --tls-key-file FILE      its private key (PEM)
  --tls-ca-cert-file FILE  the CA that client certificates must chain to (PEM)
  --tls-auth-clients yes|no|optional
                           require a client certificate, ask for none, or check one if
                           sent (default yes when a CA is given, else no)
  --tls-protocols LIST     TLS versions accepted: "TLSv1.2 TLSv1.3" (the default), or one
  --tls-ciphersuites LIST  TLS 1.3 cipher suites, OpenSSL's names joined by ':'
  --tls-ciphers LIST       TLS 1.2 ciphers, an OpenSSL cipher list
  --tls-handshake-timeout SECONDS
                           close a TLS client that has not finished its handshake by then
                           (1 to 300, default 10)
  --resp-key-prefix P      RESP keys are P followed by the userId (default: the userId alone)
  --db PATH                store file (default $CACHE_DIRECTORY/profiles.sqlite3, else
                           $XDG_CACHE_HOME/profiled/profiles.sqlite3, else ~/.cache/profiled/profiles.sqlite3)
  --cache-mb N             cache size in MiB (default 256)
  --postgres CONNINFO      share a PostgreSQL database with other profiled nodes instead of a
                           store file (libpq connection string or URI; not with --db)
  --lease-ms N             how stale another node's write may look here, at most, with
                           --postgres (50 to 60000, default 1000)
  --init-schema            with --postgres: create (or bring up to date) the profiled schema
                           in that database, then exit 0 without serving
  --write-buffer-mb N      memory for writes not yet merged into the store's table, in MiB
                           (default 256); writes slow down past half of it
  --threads N              worker threads (default: one per core)
  --tokens FILE            require AUTH; FILE holds '<role> <token>' lines (roles: read, write, admin)
  --max-connections N      TCP and Unix together (default 10000)
  --max-line BYTES         longest request line, LF included (default 65536)
  --max-client-memory SIZE the most all client connections together may hold (input, unsent
                           replies, queued transactions): 256mb, 1gb, bytes; past it the one
                           holding the most is closed (default 256mb; 0: no limit)
  --tracking-table-max-keys N
                           the most keys CLIENT TRACKING remembers readers of; past it, keys
                           are forgotten and their readers told to drop them (default 1000000)
  --sync normal|full       when the write log is synced to disk: normal, once a second;
                           full, before every commit's reply (default normal)
  --allow-insecure-bind    allow a non-loopback --host or --metrics without --tokens
  --metrics HOST:PORT      serve /metrics (Prometheus) and /healthz over HTTP (default off)
  --metrics-tls            serve them over HTTPS, with the TLS listeners' certificate
  --log-level LEVEL        error, warn, info or debug (default info)
  --help                   show this help
  --version                show the version
"""

/// A command line or config file that cannot be used: one sentence, exit 64.
struct UsageError: Error {
    var message: String
}

enum Parsed {
    case run(ServerConfiguration, StoreOptions, LogLevel)
    /// `--init-schema`: prepare the schema in this PostgreSQL database, then exit.
    case initSchema(conninfo: String)
    case help
    case version
}

/// The settings, as the flags and the config file name them.
///
/// Each option is parsed from text the same way whether it came from the command line or
/// from a config file, so the two cannot drift apart.
struct Settings {
    var configuration = ServerConfiguration()
    var store = StoreOptions()
    var logLevel = LogLevel.info
    var tlsCertificateFile: String? = nil
    var tlsKeyFile: String? = nil
    var tlsCAFile: String? = nil
    var tlsClientAuthentication: TLSClientAuthentication? = nil
    var tlsProtocols = TLSProtocols.standard
    var tlsCiphersuites: String? = nil
    var tlsCiphers: String? = nil
    /// Which TLS options were given, for the check that a TLS listener uses them.
    var tlsOptionsGiven: [String] = []

    /// Options that take no value on the command line; in a config file they take true/false.
    static let switches: Set<String> = ["allow-insecure-bind", "metrics-tls"]
    static let names: [String] = ["host", "port", "unix", "resp-port", "tls-port", "resp-tls-port", "tls-cert-file", "tls-key-file",
                                  "tls-ca-cert-file", "tls-auth-clients", "tls-protocols", "tls-ciphersuites", "tls-ciphers",
                                  "tls-handshake-timeout", "resp-key-prefix", "db", "postgres", "lease-ms", "cache-mb", "write-buffer-mb", "threads", "tokens", "max-connections",
                                  "max-line", "max-client-memory", "tracking-table-max-keys", "sync", "allow-insecure-bind", "metrics", "metrics-tls", "log-level"]

    /// Applies one option; `name` is without the leading dashes.
    mutating func apply(_ name: String, _ value: String) throws(UsageError) {
        func number(_ range: ClosedRange<Int>) throws(UsageError) -> Int {
            try FlagValue.wholeNumber(value, in: range, for: name, error: UsageError.init(message:))
        }
        func nonEmpty(_ what: String) throws(UsageError) -> String {
            guard !value.isEmpty else { throw UsageError(message: "\(name) needs \(what)") }
            return value
        }
        // "off", not 0, turns a listener off: 0 already means "pick a free port".
        func portOrOff() throws(UsageError) -> UInt16? {
            value == "off" ? nil : UInt16(try FlagValue.wholeNumber(value, in: 0...65535, for: name, error: { _ in
                UsageError(message: "\(name) takes a port from 0 to 65535 or 'off', not '\(value)'")
            }))
        }
        if name.hasPrefix("tls-") { tlsOptionsGiven.append(name) }
        switch name {
        case "host": configuration.host = try nonEmpty("an address")
        case "port": configuration.port = try portOrOff()
        case "unix": configuration.unixPath = try nonEmpty("a path")
        case "resp-port": configuration.respPort = try portOrOff()
        case "tls-port": configuration.tlsPort = try portOrOff()
        case "resp-tls-port": configuration.respTLSPort = try portOrOff()
        case "tls-cert-file": tlsCertificateFile = try nonEmpty("a path")
        case "tls-key-file": tlsKeyFile = try nonEmpty("a path")
        case "tls-ca-cert-file": tlsCAFile = try nonEmpty("a path")
        case "tls-auth-clients":
            guard let mode = TLSClientAuthentication(rawValue: value) else {
                throw UsageError(message: "tls-auth-clients takes yes, no or optional, not '\(value)'")
            }
            tlsClientAuthentication = mode
        case "tls-protocols":
            guard let protocols = TLSProtocols(parsing: value) else {
                throw UsageError(message: "tls-protocols takes TLSv1.2, TLSv1.3 or both, not '\(value)'")
            }
            tlsProtocols = protocols
        case "tls-ciphersuites": tlsCiphersuites = try nonEmpty("a list of cipher suites")
        case "tls-ciphers": tlsCiphers = try nonEmpty("a cipher list")
        case "tls-handshake-timeout": configuration.tlsHandshakeTimeoutSeconds = try number(1...300)
        case "resp-key-prefix":
            let prefix = Array(try nonEmpty("a prefix").utf8)
            guard prefix.count <= 64, prefix.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
                throw UsageError(message: "resp-key-prefix takes 1 to 64 bytes without blanks or control characters, not '\(value)'")
            }
            configuration.respKeyPrefix = prefix
        case "db": store.databasePath = try nonEmpty("a path")
        case "postgres": store.postgres = try nonEmpty("a connection string")
        case "lease-ms": store.leaseMilliseconds = try number(50...60_000)
        case "cache-mb": configuration.cacheMegabytes = try number(1...1_048_576)
        case "write-buffer-mb": store.writeBufferMegabytes = try number(1...1_048_576)
        case "threads": configuration.threads = try number(1...256)
        case "tokens": configuration.tokensPath = try nonEmpty("a path")
        case "max-connections": configuration.maxConnections = try number(1...1_000_000)
        case "max-line": configuration.maxLine = try number(64...16_777_216)
        case "max-client-memory":
            guard let bytes = byteSize(value), bytes == 0 || bytes >= 1 << 20 else {
                throw UsageError(message: "max-client-memory takes 0 or a size of at least 1mb (256mb, 1gb, or bytes), not '\(value)'")
            }
            configuration.maxClientMemory = bytes
        case "tracking-table-max-keys": configuration.trackingTableMaxKeys = try number(1...100_000_000)
        case "sync":
            switch value {
            case "normal": store.synchronous = .normal
            case "full": store.synchronous = .full
            default: throw UsageError(message: "sync takes 'normal' or 'full', not '\(value)'")
            }
        case "allow-insecure-bind", "metrics-tls":
            let on: Bool
            switch value {
            case "true", "yes", "on": on = true
            case "false", "no", "off": on = false
            default: throw UsageError(message: "\(name) takes true or false, not '\(value)'")
            }
            if name == "metrics-tls" { configuration.metricsTLS = on } else { configuration.allowInsecureBind = on }
        case "metrics":
            guard let colon = value.lastIndex(of: ":"), let port = UInt16(value[value.index(after: colon)...]),
                  colon > value.startIndex else {
                throw UsageError(message: "metrics takes HOST:PORT, not '\(value)'")
            }
            configuration.metricsAddress = (String(value[..<colon]), port)
        case "log-level":
            guard let level = LogLevel(name: value) else {
                throw UsageError(message: "log-level takes error, warn, info or debug, not '\(value)'")
            }
            logLevel = level
        default:
            throw UsageError(message: "unknown option '\(name)'")
        }
    }

    /// Applies a `key = value` config file: `#` starts a comment line, blank lines are ignored.
    /// Lines end in LF or CRLF, and a leading UTF-8 byte order mark is skipped, as editors on
    /// other systems write them.
    ///
    /// - Throws: `FILE:LINE: reason` for an unknown key, a malformed line or a bad value.
    mutating func applyConfigFile(_ path: String, skipping given: Set<String>) throws(UsageError) {
        guard var bytes = readFile(path)?[...] else {
            throw UsageError(message: "\(path): cannot read the config file (\(String(cString: strerror(errno))))")
        }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        var lineNumber = 0
        // Split as bytes: as a String, CR LF is one Character and would never match "\n".
        for raw in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            lineNumber += 1
            let line = String(decoding: raw, as: UTF8.self).trimmingBlanks()
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let eq = line.firstIndex(of: "=") else {
                throw UsageError(message: "\(path):\(lineNumber): expected 'key = value'")
            }
            let key = String(line[..<eq].trimmingBlanks())
            let value = String(line[line.index(after: eq)...].trimmingBlanks())
            guard Settings.names.contains(key) else {
                throw UsageError(message: "\(path):\(lineNumber): unknown key '\(key)'")
            }
            // The command line wins; the file's value is still checked so a typo never waits for a later start.
            var scratch = self
            do {
                try scratch.apply(key, value)
            } catch {
                throw UsageError(message: "\(path):\(lineNumber): \(error.message)")
            }
            if !given.contains(key) { self = scratch }
        }
    }
}

/// Parses profiled's flags (`--flag value` or `--flag=value`) and the config file they name.
func parseArguments(_ arguments: [String]) throws(UsageError) -> Parsed {
    var settings = Settings()
    var given: Set<String> = []
    var configPath: String? = nil
    var initSchema = false
    var reader = FlagReader(arguments, error: UsageError.init(message:))
    while let flag = reader.nextFlag() {
        switch flag.spelling {
        case "--help", "-h": return .help
        case "--version": return .version
        default: break
        }
        guard flag.spelling.hasPrefix("--") else { throw UsageError(message: "unexpected argument '\(flag.spelling)'") }
        let name = flag.name
        // An action, not a setting: the config file has no key for it.
        if name == "init-schema" {
            try reader.refuseValue(of: flag)
            initSchema = true
            continue
        }
        guard name == "config" || Settings.names.contains(name) else { throw UsageError(message: "unknown flag '\(flag.spelling)'") }
        let value: String
        if Settings.switches.contains(name) {
            try reader.refuseValue(of: flag)
            value = "true"
        } else {
            value = try reader.value(of: flag)
        }
        if name == "config" {
            configPath = value
            continue
        }
        do {
            try settings.apply(name, value)
        } catch {
            throw UsageError(message: "--" + error.message)
        }
        given.insert(name)
    }
    if let configPath { try settings.applyConfigFile(configPath, skipping: given) }
    if settings.store.postgres != nil && settings.store.databasePath != nil {
        throw UsageError(message: "--postgres and --db name two different stores: give one of them")
    }
    if initSchema {
        guard let conninfo = settings.store.postgres else {
            throw UsageError(message: "--init-schema prepares a PostgreSQL database: give --postgres (or postgres in the config file)")
        }
        return .initSchema(conninfo: conninfo)
    }
    try settings.assembleTLS()
    let c = settings.configuration
    if c.port == nil && c.respPort == nil && c.tlsPort == nil && c.respTLSPort == nil && c.unixPath == nil {
        throw UsageError(message: "every listener is off: give a --port, --resp-port, --tls-port, --resp-tls-port or --unix")
    }
    // Protected mode refuses a combination of flags, so it is a usage error like any other.
    if let problem = settings.configuration.insecureBindProblem { throw UsageError(message: problem) }
    return .run(settings.configuration, settings.store, settings.logLevel)
}

extension Settings {
    /// Makes the TLS listeners' settings from the TLS options, or refuses a combination that
    /// cannot serve: a TLS port without a certificate and key, TLS options without a TLS port,
    /// client certificates required or checked without the CA they chain to.
    mutating func assembleTLS() throws(UsageError) {
        if configuration.metricsTLS && configuration.metricsAddress == nil {
            throw UsageError(message: "--metrics-tls serves the metrics over TLS: give --metrics HOST:PORT")
        }
        let listening = configuration.tlsPort != nil || configuration.respTLSPort != nil || configuration.metricsTLS
        let settingsGiven = tlsOptionsGiven.filter { $0 != "tls-port" }
        guard listening else {
            if let first = settingsGiven.first {
                throw UsageError(message: "--\(first) configures TLS listeners, and none is on: give --tls-port, --resp-tls-port or --metrics-tls")
            }
            return
        }
        guard let certificate = tlsCertificateFile, let key = tlsKeyFile else {
            throw UsageError(message: "a TLS listener needs --tls-cert-file and --tls-key-file")
        }
        var tls = TLSServerSettings(certificateFile: certificate, keyFile: key)
        tls.caCertificateFile = tlsCAFile
        // As Redis: with a CA, client certificates are required unless told otherwise.
        tls.clientAuthentication = tlsClientAuthentication ?? (tlsCAFile == nil ? .no : .yes)
        if tls.clientAuthentication != .no && tlsCAFile == nil {
            throw UsageError(message: "--tls-auth-clients \(tls.clientAuthentication.rawValue) checks client certificates against a CA: give --tls-ca-cert-file")
        }
        tls.protocols = tlsProtocols
        tls.ciphersuites = tlsCiphersuites
        tls.ciphers = tlsCiphers
        configuration.tls = tls
    }
}

extension StringProtocol {
    func trimmingBlanks() -> SubSequence {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }
}

/// A size as Redis's configuration writes one: bytes, or a whole number with k, kb, m, mb, g or
/// gb (any case; powers of 1024). Nil for anything else, or past 1 TiB.
func byteSize(_ text: String) -> Int? {
    let lower = text.lowercased()
    let digits = lower.prefix { $0.isASCII && $0.isNumber }
    guard !digits.isEmpty, digits.count <= 13, let number = Int(digits) else { return nil }
    let unit: Int
    switch lower.dropFirst(digits.count) {
    case "", "b": unit = 1
    case "k", "kb": unit = 1 << 10
    case "m", "mb": unit = 1 << 20
    case "g", "gb": unit = 1 << 30
    default: return nil
    }
    let (bytes, overflow) = number.multipliedReportingOverflow(by: unit)
    guard !overflow, bytes <= 1 << 40 else { return nil }
    return bytes
}

func readFile(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&chunk, 1, chunk.count, file)
        if n > 0 { result.append(contentsOf: chunk[0..<n]) }
        if n < chunk.count { return ferror(file) != 0 ? nil : result }
    }
}
