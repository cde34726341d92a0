import Glibc

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// Writes text to standard error at once.
func writeStandardError(_ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(2, $0.baseAddress! + offset, $0.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        offset += n
    }
}

/// Import progress on standard error: on a terminal a bar redrawn in place
/// (rows, rows/s, and percent and ETA when the input size is known);
/// elsewhere a plain line every few seconds at most. Always a summary at the end.
///
/// Threading: the importing thread.
final class ImportProgress {
    private let totalBytes: Int?
    private let isTerminal: Bool
    private let started: Double
    private let interval: Double
    private var lastDrawn: Double
    private var barShown = false

    init(totalBytes: Int?, isTerminal: Bool) {
        self.totalBytes = totalBytes
        self.isTerminal = isTerminal
        started = monotonicSeconds()
        lastDrawn = started
        interval = isTerminal ? 0.2 : 5
    }

    var elapsed: Double { monotonicSeconds() - started }

    /// Redraws if it is time; cheap enough to call every few thousand rows.
    func update(rows: Int, bytes: Int) {
        let now = monotonicSeconds()
        guard now - lastDrawn >= interval else { return }
        lastDrawn = now
        let seconds = now - started
        let rate = Int(Double(rows) / max(seconds, 1e-9))
        var text = "\(rows) rows, \(rate) rows/s"
        var fraction: Double? = nil
        if let totalBytes, totalBytes > 0 {
            let done = min(1, Double(bytes) / Double(totalBytes))
            fraction = done
            text += ", \(Int(done * 100))%"
            if done > 0 {
                text += ", ETA \(Self.clock(seconds * (1 - done) / done))"
            }
        }
        if isTerminal {
            var bar = ""
            if let fraction {
                let filled = Int(fraction * 30)
                bar = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled) + "] "
            }
            writeStandardError("\r\u{1B}[K" + bar + text)
            barShown = true
        } else {
            writeStandardError("profilectl: " + text + "\n")
        }
    }

    /// Prints a line of its own, clearing the bar first.
    func message(_ line: String) {
        clearBar()
        writeStandardError(line + "\n")
    }

    func clearBar() {
        if barShown {
            writeStandardError("\r\u{1B}[K")
            barShown = false
        }
    }

    static func clock(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        let (h, m, s) = (total / 3600, total / 60 % 60, total % 60)
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return h > 0 ? "\(h):\(two(m)):\(two(s))" : "\(m):\(two(s))"
    }
}
