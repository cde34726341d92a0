import Glibc
import Synchronization

/// Severity of a log line; lines below the configured level are dropped. A plain value; any
/// thread may use it.
public enum LogLevel: Int, Sendable, Comparable {
    case debug, info, warn, error

    public init?(name: String) {
        switch name {
        case "debug": self = .debug
        case "info": self = .info
        case "warn": self = .warn
        case "error": self = .error
        default: return nil
        }
    }

    var name: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .warn: "warn"
        case .error: "error"
        }
    }

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// One line per event that matters, on stderr, in logfmt (`ts=... level=... msg=... key=value`).
///
/// Thread-safe: any thread may log. Never called on the request path.
public enum Log {
    private static let threshold = Atomic<Int>(LogLevel.info.rawValue)

    public static var level: LogLevel {
        get { LogLevel(rawValue: threshold.load(ordering: .relaxed)) ?? .info }
        set { threshold.store(newValue.rawValue, ordering: .relaxed) }
    }

    public static func debug(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        write(.debug, message, fields)
    }
    public static func info(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        write(.info, message, fields)
    }
    /// `info` with fields made at run time, in their order.
    public static func info(_ message: String, _ fields: [(key: String, value: String)]) {
        write(.info, message, fields)
    }
    public static func warn(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        write(.warn, message, fields)
    }
    public static func error(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        write(.error, message, fields)
    }

    static func write(_ level: LogLevel, _ message: String, _ fields: some Sequence<(key: String, value: String)>) {
        guard level >= self.level else { return }
        var line = "ts=\(timestamp()) level=\(level.name) msg=\(quoted(message))"
        for (key, value) in fields {
            line += " \(key)=\(quoted(value))"
        }
        line += "\n"
        // One write(2) per line so lines from different threads never interleave.
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(2, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return }
                offset += n
            }
        }
    }

    /// logfmt: a value is bare unless it is empty or holds a blank, `=` or `"`.
    static func quoted(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.utf8.contains { $0 <= 0x20 || $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "\"") || $0 == 0x7F }
        guard needsQuotes else { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// RFC 3339 UTC with milliseconds, from the wall clock.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(now.tv_nsec / 1_000_000), 3))Z"
    }
}

/// Lines of a kind that clients can cause at will (a failed TLS handshake), at most one a
/// second: each says how many were left out since the one before. Any thread may use it.
package final class RateLimitedLog: Sendable {
    private let lastSecond = Atomic<Int>(Int.min)
    private let leftOut = Atomic<Int>(0)

    package init() {}

    /// Writes the line unless one was written this second, then counts it as left out; the
    /// fields are made only for a line that is written.
    package func warn(_ message: String, _ fields: @autoclosure () -> [(key: String, value: String)]) {
        guard LogLevel.warn >= Log.level else { return }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let second = now.tv_sec
        let last = lastSecond.load(ordering: .relaxed)
        guard second > last, lastSecond.compareExchange(expected: last, desired: second, ordering: .relaxed).exchanged else {
            leftOut.add(1, ordering: .relaxed)
            return
        }
        let skipped = leftOut.exchange(0, ordering: .relaxed)
        Log.write(.warn, message, skipped == 0 ? fields() : fields() + [(key: "left_out", value: "\(skipped)")])
    }
}
