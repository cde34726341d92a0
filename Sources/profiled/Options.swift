import ProfileServer
import ProfileStore

let version = "profiled 0.1.0"

let usage = """
usage: profiled [options]
  --host HOST              TCP address to listen on (default 127.0.0.1)
  --port PORT              TCP port (default 7711; 0 picks a free one)
  --unix PATH              also listen on a Unix domain socket
  --db PATH                store file (default $CACHE_DIRECTORY/profiles.sqlite3, else
                           $XDG_CACHE_HOME/profiled/profiles.sqlite3, else ~/.cache/profiled/profiles.sqlite3)
  --cache-mb N             LRU size in MiB (default 256)
  --threads N              worker threads (default: one per core)
  --tokens FILE            require AUTH; FILE holds '<role> <token>' lines (roles: read, write, admin)
  --max-connections N      TCP and Unix together (default 10000)
  --max-line BYTES         longest request line, LF included (default 65536)
  --sync normal|full       SQLite synchronous mode (default normal)
  --allow-insecure-bind    allow a non-loopback --host without --tokens
  --log-level LEVEL        error, warn, info or debug (default info)
  --help                   show this help
  --version                show the version
"""

/// A command line that cannot be used: one sentence for stderr, exit 64.
struct UsageError: Error {
    var message: String
}

enum Parsed {
    case run(ServerConfiguration)
    case help
    case version
}

/// Parses profiled's flags (`--flag value` or `--flag=value`).
func parseArguments(_ arguments: [String]) throws(UsageError) -> Parsed {
    var configuration = ServerConfiguration()
    var index = 0
    while index < arguments.count {
        var flag = arguments[index]
        var inlineValue: String? = nil
        if flag.hasPrefix("--"), let eq = flag.firstIndex(of: "=") {
            inlineValue = String(flag[flag.index(after: eq)...])
            flag = String(flag[..<eq])
        }
        index += 1
        func value() throws(UsageError) -> String {
            if let inlineValue { return inlineValue }
            guard index < arguments.count else { throw UsageError(message: "\(flag) needs a value") }
            index += 1
            return arguments[index - 1]
        }
        func number(_ range: ClosedRange<Int>) throws(UsageError) -> Int {
            let text = try value()
            guard let n = Int(text), range.contains(n) else {
                throw UsageError(message: "\(flag) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return n
        }
        func noValue() throws(UsageError) {
            if inlineValue != nil { throw UsageError(message: "\(flag) takes no value") }
        }
        switch flag {
        case "--host":
            let host = try value()
            guard !host.isEmpty else { throw UsageError(message: "--host needs a non-empty address") }
            configuration.host = host
        case "--port": configuration.port = UInt16(try number(0...65535))
        case "--unix":
            let path = try value()
            guard !path.isEmpty else { throw UsageError(message: "--unix needs a path") }
            configuration.unixPath = path
        case "--db":
            let path = try value()
            guard !path.isEmpty else { throw UsageError(message: "--db needs a path") }
            configuration.databasePath = path
        case "--cache-mb": configuration.cacheMegabytes = try number(1...1_048_576)
        case "--threads": configuration.threads = try number(1...256)
        case "--tokens": configuration.tokensPath = try value()
        case "--max-connections": configuration.maxConnections = try number(1...1_000_000)
        case "--max-line": configuration.maxLine = try number(64...16_777_216)
        case "--sync":
            switch try value() {
            case "normal": configuration.synchronous = .normal
            case "full": configuration.synchronous = .full
            case let other: throw UsageError(message: "--sync takes 'normal' or 'full', not '\(other)'")
            }
        case "--allow-insecure-bind":
            try noValue()
            configuration.allowInsecureBind = true
        case "--log-level":
            let name = try value()
            guard let level = LogLevel(name: name) else {
                throw UsageError(message: "--log-level takes error, warn, info or debug, not '\(name)'")
            }
            Log.level = level
        case "--help", "-h":
            return .help
        case "--version":
            return .version
        default:
            throw UsageError(message: flag.hasPrefix("-") ? "unknown flag '\(flag)'" : "unexpected argument '\(flag)'")
        }
    }
    return .run(configuration)
}
