/// A latency for people: ns, us, ms or s with three significant digits.
public func duration(nanoseconds: UInt64) -> String {
    let value = Double(nanoseconds)
    func fixed(_ x: Double, _ unit: String) -> String {
        let decimals = x < 10 ? 2 : x < 100 ? 1 : 0
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let rounded = (x * scale).rounded() / scale
        return decimals == 0 ? "\(Int(rounded)) \(unit)" : "\(rounded) \(unit)"
    }
    if nanoseconds < 1_000 { return "\(nanoseconds) ns" }
    if nanoseconds < 1_000_000 { return fixed(value / 1e3, "us") }
    if nanoseconds < 1_000_000_000 { return fixed(value / 1e6, "ms") }
    return fixed(value / 1e9, "s")
}

extension BenchResult {
    func perSecond(_ n: Int) -> Double { wallSeconds > 0 ? Double(n) / wallSeconds : 0 }

    /// The harness's CPU seconds per wall second, or nil for a run too short to say: starting
    /// the threads costs CPU time of its own, so a run that failed at once showed 490%.
    var harnessCPUShare: Double? {
        wallSeconds >= 0.1 ? harnessCPUSeconds / wallSeconds : nil
    }

    /// The run as a table: one row per operation and a total, then the harness's CPU use.
    public var text: String {
        let o = options
        var lines: [String] = []
        let mode = o.rate.map { "open loop at \(grouped($0)) req/s" } ?? "closed loop"
        let length = o.requests.map { "\(grouped($0)) requests" } ?? "\(o.durationSeconds) s"
        lines.append("profilebench -> \(o.endpointDescription): \(o.connections) connections x pipeline \(o.pipeline), "
            + "\(o.threads) thread\(o.threads == 1 ? "" : "s"), \(mode), \(length)")
        lines.append("ids: \(grouped(o.keys)) \(o.distribution), miss ratio \(o.missRatio), value \(o.valueSize) bytes, "
            + "mix \(o.mix)\(o.mix.contains(.mget) ? ", mget of \(o.mgetSize)" : "")")
        if let preload {
            lines.append("preload: \(grouped(preload.profiles)) profiles in \(duration(nanoseconds: UInt64(preload.seconds * 1e9))), "
                + "\(grouped(Int(preload.perSecond))) profiles/s, \(preload.errors) errors")
        }
        if let warm {
            lines.append("warm: \(grouped(warm.profiles)) ids read in \(duration(nanoseconds: UInt64(warm.seconds * 1e9))), "
                + "\(grouped(Int(warm.perSecond))) ids/s, \(warm.errors) errors")
        }
        let header = ["operation", "requests", "req/s", "ids/s", "errors", "found", "p50", "p90", "p99", "p99.9", "max"]
        var rows = [header]
        func row(_ name: String, _ s: OperationStats, lookup: Bool) -> [String] {
            let found = lookup && s.keys > 0 ? "\((Double(s.hits) * 1000 / Double(s.keys)).rounded() / 10)%" : "-"
            return [name, grouped(s.requests), grouped(Int(perSecond(s.requests))), grouped(Int(perSecond(s.keys))),
                    grouped(s.errors), found]
                + [50, 90, 99, 99.9].map { duration(nanoseconds: s.latency.percentile($0)) }
                + [duration(nanoseconds: s.latency.max)]
        }
        for entry in operations { rows.append(row(entry.operation.description, entry.stats, lookup: entry.operation.isLookup)) }
        if operations.count > 1 { rows.append(row("total", total, lookup: false)) }
        let widths = (0..<header.count).map { column in rows.map { $0[column].count }.max()! }
        for r in rows {
            lines.append(r.enumerated().map { column, cell in
                let pad = String(repeating: " ", count: widths[column] - cell.count)
                return column == 0 ? cell + pad : pad + cell
            }.joined(separator: "  "))
        }
        let share = harnessCPUShare.map { "\(Int(($0 * 100).rounded()))% of one core" } ?? "too short a run for a share"
        lines.append("harness CPU: \((harnessCPUSeconds * 100).rounded() / 100) s in \((wallSeconds * 100).rounded() / 100) s wall "
            + "(\(share))")
        if lateRequests > 0 {
            lines.append("behind schedule: \(grouped(lateRequests)) requests fell due but every connection was full; "
                + "the server did not keep up with --rate")
        }
        if let firstError { lines.append("first error reply: \(firstError)") }
        if let failure { lines.append("FAILED: \(failure)") }
        return lines.joined(separator: "\n")
    }

    /// The run as one JSON object.
    public var json: String {
        let o = options
        func latency(_ h: LatencyHistogram) -> String {
            object([("mean", number(h.mean)), ("p50", "\(h.percentile(50))"), ("p90", "\(h.percentile(90))"),
                    ("p99", "\(h.percentile(99))"), ("p999", "\(h.percentile(99.9))"), ("max", "\(h.max)")])
        }
        func stats(_ s: OperationStats) -> String {
            object([("requests", "\(s.requests)"), ("perSecond", number(perSecond(s.requests))),
                    ("keys", "\(s.keys)"), ("keysPerSecond", number(perSecond(s.keys))), ("errors", "\(s.errors)"),
                    ("notFound", "\(s.notFound)"), ("hits", "\(s.hits)"), ("latencyNs", latency(s.latency))])
        }
        let preloadJSON = preload.map {
            object([("profiles", "\($0.profiles)"), ("seconds", number($0.seconds)), ("perSecond", number($0.perSecond)),
                    ("errors", "\($0.errors)")])
        } ?? "null"
        let warmJSON = warm.map {
            object([("ids", "\($0.profiles)"), ("seconds", number($0.seconds)), ("perSecond", number($0.perSecond)),
                    ("errors", "\($0.errors)")])
        } ?? "null"
        return object([
            ("target", string(o.target.rawValue)), ("endpoint", string(o.endpointDescription)),
            ("connections", "\(o.connections)"), ("pipeline", "\(o.pipeline)"), ("threads", "\(o.threads)"),
            ("rate", o.rate.map { "\($0)" } ?? "null"), ("keys", "\(o.keys)"), ("distribution", string(o.distribution.description)),
            ("mix", string(o.mix.description)), ("mgetSize", "\(o.mgetSize)"), ("missRatio", number(o.missRatio)),
            ("valueSize", "\(o.valueSize)"), ("preload", preloadJSON), ("warm", warmJSON),
            ("operations", object(operations.map { ($0.operation.description, stats($0.stats)) })),
            ("total", stats(total)), ("wallSeconds", number(wallSeconds)),
            ("harness", object([("cpuSeconds", number(harnessCPUSeconds)),
                                ("cpuShareOfOneCore", harnessCPUShare.map(number) ?? "null")])),
            ("lateRequests", "\(lateRequests)"), ("succeeded", succeeded ? "true" : "false"),
            ("firstError", firstError.map(string) ?? "null"), ("failure", failure.map(string) ?? "null"),
        ])
    }
}

private func object(_ members: [(String, String)]) -> String {
    "{" + members.map { "\(string($0.0)):\($0.1)" }.joined(separator: ",") + "}"
}

private func number(_ x: Double) -> String {
    guard x.isFinite else { return "0" }
    return "\((x * 1000).rounded() / 1000)"
}

private func string(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
