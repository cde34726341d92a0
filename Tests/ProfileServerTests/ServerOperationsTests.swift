import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Running profiled as a service: config file, /metrics, /healthz, SIGHUP, logs, the unit.
@Suite struct ServerOperationsTests {
    /// Every thread that lives as long as the server is named, so an operator's `top -H` tells
    /// them apart, and runs at normal priority: the merger too, since a merge someone waits
    /// for must keep up (the steps of a merge nobody waits for run on threads of their own,
    /// named "merge", at SCHED_IDLE).
    @Test func threadsAreNamedAndRunAtNormalPriority() throws {
        let server = try TestServer(["--threads", "2"])
        try server.connect().set(Profile(userId: "a", name: "n", portraitUri: "u"))
        let expected = ["profiled": 0, "writer": 0, "merger": 0, "sorter": 0, "log-sync": 0, "worker-0": 0, "worker-1": 0]
        // Each thread names itself once it runs: under load, one may still carry the process's name.
        var niceByName: [String: Int] = [:]
        for _ in 0..<200 {
            niceByName = try threadNiceValues(server.pid)
            if niceByName == expected { break }
            usleep(10_000)
        }
        #expect(niceByName == expected)
    }

    @Test func configFileSetsEveryFlagAndTheCommandLineWins() throws {
        let directory = try makeTemporaryDirectory()
        let config = directory + "/profiled.conf"
        writeText(config, """
            # a comment
            port = 0
              cache-mb =  3
            max-line = 1024

            allow-insecure-bind = false
            log-level = debug
            db = \(directory)/from-config.sqlite3
            """)
        let server = try TestServer(["--config", config, "--db", directory + "/from-flag.sqlite3"], directory: directory)
        let c = try server.connect()
        let stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
        #expect(stats["cache_limit_bytes"] == "\(3 * 1_048_576)")
        #expect(server.log.contains("path=\(directory)/from-flag.sqlite3"))
        #expect(try c.roundTrip("GET " + String(repeating: "a", count: 1100) + "\n").hasPrefix("ERROR TOOLONG"))
    }

    @Test func aConfigFileWithCRLFLinesAndAByteOrderMarkIsRead() throws {
        let directory = try makeTemporaryDirectory()
        let config = directory + "/profiled.conf"
        writeText(config, "\u{FEFF}# written on Windows\r\nport = 0\r\nmax-line = 1024\r\n\r\ncache-mb = 3\r\n")
        let server = try TestServer(["--config", config], directory: directory)
        let c = try server.connect()
        let stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
        #expect(stats["cache_limit_bytes"] == "\(3 * 1_048_576)")
        #expect(try c.roundTrip("GET " + String(repeating: "a", count: 1100) + "\n").hasPrefix("ERROR TOOLONG"))
    }

    @Test func configErrorsNameFileAndLine() throws {
        let directory = try makeTemporaryDirectory()
        let cases: [(String, String)] = [
            ("port = 0\nbogus = 1\n", ":2: unknown key 'bogus'"),
            ("port = 0\n\ncache-mb = lots\n", ":3: cache-mb takes a whole number"),
            ("# x\nport\n", ":2: expected 'key = value'"),
            ("sync = sometimes\n", ":1: sync takes 'normal' or 'full'"),
            ("allow-insecure-bind = maybe\n", ":1: allow-insecure-bind takes true or false"),
            ("metrics = nowhere\n", ":1: metrics takes HOST:PORT"),
            ("\u{FEFF}port = 0\r\n\r\ncache-mb = lots\r\n", ":3: cache-mb takes a whole number from 1 to 1048576, not 'lots'"),
        ]
        for (i, (text, expected)) in cases.enumerated() {
            let path = directory + "/bad\(i).conf"
            writeText(path, text)
            let (status, output) = try runToCompletion(executable("profiled"), ["--config", path, "--db", directory + "/db"])
            #expect(status == 64)
            #expect(output.contains(path + expected), "\(output)")
            #expect(output.split(separator: "\n").count == 1, "\(output)")
        }
        // A bad value is an error even where the command line overrides the key.
        let path = directory + "/overridden.conf"
        writeText(path, "port = banana\n")
        let (status, output) = try runToCompletion(executable("profiled"), ["--config", path, "--port", "0"])
        #expect(status == 64)
        #expect(output.contains(path + ":1:"))
        let missing = try runToCompletion(executable("profiled"), ["--config", directory + "/none.conf"])
        #expect(missing.status == 64)
        #expect(missing.output.contains(directory + "/none.conf"))
    }

    @Test func metricsMatchStatsAndParseAsPrometheusText() throws {
        let server = try TestServer(["--metrics", "127.0.0.1:0"])
        let c = try server.connect()
        try c.mset([Profile(userId: "a", name: "n", portraitUri: "u"), Profile(userId: "b", name: "n", portraitUri: "u")])
        _ = try c.get(Array("a".utf8))
        _ = try c.get(Array("zz".utf8))
        _ = try c.del(Array("b".utf8))
        _ = try? c.call([Array("NOPE".utf8)])
        // Once the writes are merged and the log synced, nothing changes until the next request.
        var stats: [String: String] = [:]
        for _ in 0..<500 {
            stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
            if stats["unmerged_writes"] == "0" && stats["write_log_syncs"] != "0" { break }
            usleep(10_000)
        }
        #expect(stats["merged_rows"] != "0" && stats["write_log_syncs"] != "0")
        let metrics = try scrapeMetrics(metricsPort(server.log))
        let mapping = ["cmd_get": "profiled_lookups_total", "get_hits": "profiled_lookup_hits_total",
                       "get_misses": "profiled_lookup_misses_total", "cache_hits": "profiled_cache_hits_total",
                       "cache_misses": "profiled_cache_misses_total", "cmd_set": "profiled_profiles_written_total",
                       "cmd_del": "profiled_profiles_deleted_total", "store_rows": "profiled_store_rows",
                       "errors": "profiled_errors_total", "total_connections": "profiled_connections_accepted_total",
                       "curr_connections": "profiled_connections", "cache_items": "profiled_cache_items",
                       "cache_limit_bytes": "profiled_cache_limit_bytes", "cache_evictions": "profiled_cache_evictions_total",
                       "cache_small_bytes": "profiled_cache_small_bytes", "cache_promotions": "profiled_cache_promotions_total",
                       "cache_ghost_hits": "profiled_cache_ghost_hits_total",
                       "loop_moves": "profiled_connection_moves_total",
                       "unmerged_writes": "profiled_unmerged_writes", "write_buffer_bytes": "profiled_write_buffer_bytes",
                       "write_buffer_limit_bytes": "profiled_write_buffer_limit_bytes",
                       "write_delays": "profiled_write_delays_total", "merges": "profiled_merges_total",
                       "merged_rows": "profiled_merged_rows_total", "write_log_syncs": "profiled_write_log_syncs_total"]
        for (stat, metric) in mapping {
            #expect(stats[stat] != nil, "STATS has no \(stat)")
            #expect(metrics[metric].map { Double($0) } == stats[stat].map { Double($0) }, "\(stat) vs \(metric)")
        }
        // Latency histograms, per command, with counts matching what was sent.
        #expect(metrics["profiled_request_duration_seconds_count{command=get}"].flatMap { Double($0) } == 2)
        #expect(metrics["profiled_request_duration_seconds_count{command=mset}"].flatMap { Double($0) } == 1)
        // And the shared store's invalidation lag, empty on a node of its own, whose kind says so.
        #expect(metrics["profiled_invalidation_lag_seconds_count"].flatMap { Double($0) } == 0)
        #expect(metrics["profiled_store_kind{kind=sqlite}"].flatMap { Double($0) } == 1)
        #expect(metrics["histogram_types"] == "2")
    }

    /// RESP's commands count in the same latency histograms as the line protocol's, by what
    /// they do: a cached HGETALL, answered on its shortest path, is a get like HGET or a miss.
    @Test func respCommandsCountInTheLatencyHistograms() throws {
        let server = try TestServer(["--metrics", "127.0.0.1:0", "--resp-port", "0"])
        let c = try server.connectRESP()
        #expect(try c.call("HSET", "a", "name", "n") == ":1\r\n")
        #expect(try c.call("HGETALL", "zz") == "*0\r\n")
        // Read once, so that the next two are answered from the cache.
        #expect(try c.call("HGET", "a", "name") == "$1\r\nn\r\n")
        for _ in 0..<2 { #expect(try c.call("HGETALL", "a") == "*2\r\n$4\r\nname\r\n$1\r\nn\r\n") }
        #expect(try c.call("PING") == "+PONG\r\n")
        let metrics = try scrapeMetrics(metricsPort(server.log))
        #expect(metrics["profiled_request_duration_seconds_count{command=get}"].flatMap { Double($0) } == 4)
        #expect(metrics["profiled_request_duration_seconds_count{command=set}"].flatMap { Double($0) } == 1)
        #expect(metrics["profiled_request_duration_seconds_count{command=ping}"].flatMap { Double($0) } == 1)
    }

    /// Whoever waits for `listening` (a supervisor, these tests) must find the server ready:
    /// every other start-up line, the metrics address included, comes before it.
    @Test func listeningIsTheLastStartUpLine() throws {
        let server = try TestServer(["--metrics", "127.0.0.1:0"])
        let lines = server.log.split(separator: "\n")
        let metrics = try #require(lines.firstIndex { $0.contains("msg=\"serving metrics\"") })
        let listening = try #require(lines.firstIndex { $0.contains("msg=listening") })
        #expect(metrics < listening)
        #expect(listening == lines.count - 1, "\(lines)")
    }

    @Test func healthzAnswersBothWays() throws {
        let server = try TestServer(["--metrics", "127.0.0.1:0"])
        let port = try metricsPort(server.log)
        #expect(try httpStatus(port: port, path: "/healthz") == 200)
        #expect(try httpStatus(port: port, path: "/nowhere") == 404)
        // The store's file is lost from under the server: once a merge into it fails, health
        // says so (within the second a write waits before it is merged). The write's id is
        // cached, so the write needs nothing from the lost table.
        let c = try server.connect()
        try c.set(Profile(userId: "a", name: "n", portraitUri: "u"))
        #expect(try c.get(Array("a".utf8)) != nil)
        truncate(server.databasePath, 0)
        unlink(server.databasePath + "-wal")
        unlink(server.databasePath + "-shm")
        try c.set(Profile(userId: "a", name: "n2", portraitUri: "u"))
        var status = 200
        for _ in 0..<100 where status == 200 {
            usleep(100_000)
            status = try httpStatus(port: port, path: "/healthz")
        }
        #expect(status == 503)
    }

    /// The metrics listener answers GET and HEAD with one reply per connection, and a request
    /// it cannot serve with its status: the wrong method, a malformed line, a head too large.
    @Test func theMetricsListenerAnswersBadRequestsWithTheirStatus() throws {
        let server = try TestServer(["--metrics", "127.0.0.1:0"])
        let port = try metricsPort(server.log)
        func exchange(_ request: String) throws -> String {
            let c = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: 5)
            c.sendRaw(Array(request.utf8))
            try c.flush()
            var text = ""
            while let line = try? c.line() { text += line + "\n" }
            return text
        }
        let head = try exchange("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n") && head.contains("Content-Length: 3\r\n") && head.hasSuffix("\r\n\r\n"), "\(head)")
        #expect(try exchange("GET /healthz?verbose=1 HTTP/1.0\n\n").hasSuffix("\r\nok\n"))
        #expect(try exchange("POST /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 405 Method Not Allowed\r\n"))
        #expect(try exchange("GET /metrics\r\n\r\n").hasPrefix("HTTP/1.1 400 Bad Request\r\n"))
        let huge = "GET /metrics HTTP/1.1\r\nX-Filler: " + String(repeating: "x", count: 9000) + "\r\n\r\n"
        #expect(try exchange(huge).hasPrefix("HTTP/1.1 431 "))
        #expect(try exchange("GET /nowhere HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 404 Not Found\r\n"))
    }

    @Test func metricsFollowTheProtectedModeRule() throws {
        let directory = try makeTemporaryDirectory()
        let (status, output) = try runToCompletion(executable("profiled"),
                                                   ["--port", "0", "--metrics", "0.0.0.0:0", "--db", directory + "/db"])
        #expect(status == 64)
        #expect(output.contains("--allow-insecure-bind"))
    }

    @Test func sighupReloadsTokensAndKeepsRoles() throws {
        let directory = try makeTemporaryDirectory()
        let tokens = directory + "/tokens"
        writeText(tokens, "write old-token\n")
        let server = try TestServer(["--tokens", tokens], directory: directory)
        let kept = try server.connect()
        try kept.auth("old-token")

        writeText(tokens, "write new-token\n")
        kill(server.pid, SIGHUP)
        try waitFor { server.log.contains("msg=\"tokens reloaded\"") }
        let fresh = try server.connect()
        #expect(try fresh.roundTrip("AUTH old-token\n").hasPrefix("ERROR DENIED"))
        #expect(try fresh.roundTrip("AUTH new-token\n") == "OK")
        // The connection that authenticated before keeps its role.
        #expect(try kept.roundTrip("SET a b c\n") == "STORED")

        // A broken file is reported with its line and the tokens in force stay.
        writeText(tokens, "write newer-token\nboss x\n")
        kill(server.pid, SIGHUP)
        try waitFor { server.log.contains("msg=\"tokens not reloaded; the previous ones stay in force\"") }
        #expect(server.log.contains(tokens + ":2:"))
        let third = try server.connect()
        #expect(try third.roundTrip("AUTH newer-token\n").hasPrefix("ERROR DENIED"))
        #expect(try third.roundTrip("AUTH new-token\n") == "OK")
    }

    @Test func logLinesAreLogfmt() throws {
        let server = try TestServer(["--log-level", "debug"])
        server.stop()
        let lines = server.log.split(separator: "\n")
        #expect(lines.count >= 4)
        for line in lines {
            let pairs = try logfmtPairs(String(line))
            #expect(pairs["ts"]?.hasSuffix("Z") == true, "\(line)")
            #expect(["debug", "info", "warn", "error"].contains(pairs["level"] ?? ""), "\(line)")
            #expect(pairs["msg"] != nil, "\(line)")
        }
    }

    @Test func systemdUnitVerifies() throws {
        guard access("/usr/bin/systemd-analyze", X_OK) == 0 else {
            print("skipped: systemd-analyze is not installed here, so Deploy/profiled.service was not verified")
            return
        }
        let directory = try makeTemporaryDirectory()
        // verify checks that ExecStart exists: point it at the built binary.
        let unit = readText(repositoryRoot() + "/Deploy/profiled.service")
            .replacing("/usr/local/bin/profiled", with: executable("profiled"))
        writeText(directory + "/profiled.service", unit)
        // verify also asks man for each Documentation= page: let it find ours, as installed.
        mkdir(directory + "/man", 0o755)
        mkdir(directory + "/man/man1", 0o755)
        writeText(directory + "/man/man1/profiled.1", readText(repositoryRoot() + "/Deploy/man/profiled.1"))
        let (status, output) = try runToCompletion("/usr/bin/systemd-analyze", ["verify", directory + "/profiled.service"],
                                                   environment: ["MANPATH": directory + "/man"])
        #expect(status == 0, "\(output)")
        #expect(!output.contains("profiled.service:"), "\(output)")
    }
}

/// Reads the port of the metrics listener from the log.
/// /metrics of the server listening on `port`, parsed by the Prometheus client library's own
/// parser (`prometheusParser`), each sample by its name and labels.
func scrapeMetrics(_ port: UInt16) throws -> [String: String] {
    let parsed = try runToCompletion("/usr/bin/env", ["python3", "-c", prometheusParser, "127.0.0.1:\(port)"])
    #expect(parsed.status == 0, "\(parsed.output)")
    var metrics: [String: String] = [:]
    for line in parsed.output.split(separator: "\n") {
        let parts = line.split(separator: " ", maxSplits: 1)
        if parts.count == 2 { metrics[String(parts[0])] = String(parts[1]) }
    }
    return metrics
}

func metricsPort(_ log: String) throws -> UInt16 {
    for line in log.split(separator: "\n") where line.contains("msg=\"serving metrics\"") {
        if let range = line.firstRange(of: "addr=127.0.0.1:") {
            if let port = UInt16(line[range.upperBound...].prefix { $0.isNumber }) { return port }
        }
    }
    throw TestFailure("no metrics address in the log: \(log)")
}

/// Each thread's name and nice value, from /proc (a background merge step's thread left out).
func threadNiceValues(_ pid: pid_t) throws -> [String: Int] {
    var niceByName: [String: Int] = [:]
    let tasks = "/proc/\(pid)/task"
    guard let directory = opendir(tasks) else { throw TestFailure("cannot list \(tasks)") }
    defer { closedir(directory) }
    while let entry = readdir(directory) {
        let task = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        guard task.first?.isNumber == true else { continue }
        let name = String(readText(tasks + "/" + task + "/comm").prefix { $0 != "\n" })
        // Field 19 of stat is the nice value; the name in field 2 may hold spaces, so
        // count from the closing parenthesis.
        let stat = readText(tasks + "/" + task + "/stat")
        guard let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.count > 16, let nice = Int(fields[16]) { niceByName[name] = nice }
    }
    niceByName["merge"] = nil  // a background merge step's thread, while one runs
    return niceByName
}

/// A plain HTTP/1.0 GET; returns the status code.
func httpStatus(port: UInt16, path: String, timeoutSeconds: Int = 30) throws -> Int {
    try httpGet(port: port, path: path, timeoutSeconds: timeoutSeconds).status
}

/// A plain HTTP/1.0 GET; returns the status code and the body.
func httpGet(port: UInt16, path: String, timeoutSeconds: Int = 30) throws -> (status: Int, body: String) {
    let c = try ProfileConnection(.tcp(host: "127.0.0.1", port: port), timeoutSeconds: timeoutSeconds)
    c.sendRaw(Array("GET \(path) HTTP/1.0\r\n\r\n".utf8))
    try c.flush()
    let status = try c.line().split(separator: " ")
    guard status.count >= 2, let code = Int(status[1]) else { throw TestFailure("bad status line") }
    while try !["", "\r"].contains(c.line()) {}
    var body = ""
    while let line = try? c.line() { body += line + "\n" }
    return (code, body)
}

/// Polls `condition` every 10 ms for up to 30 s. Generous because the whole suite runs in
/// parallel on two cores, where starting a server alone can take seconds; a condition that
/// holds returns at once, so the bound costs only the tests that fail.
func waitFor(_ condition: () -> Bool) throws {
    let deadline = monotonicSeconds() + 30
    repeat {
        if condition() { return }
        usleep(10_000)
    } while monotonicSeconds() < deadline
    throw TestFailure("condition not met in 30 s")
}

/// Splits a logfmt line into its pairs; throws on anything that is not logfmt.
func logfmtPairs(_ line: String) throws -> [String: String] {
    var pairs: [String: String] = [:]
    var rest = Substring(line)
    while !rest.isEmpty {
        guard let eq = rest.firstIndex(of: "=") else { throw TestFailure("no '=' in \(rest)") }
        let key = String(rest[..<eq])
        guard !key.isEmpty, !key.contains(" ") else { throw TestFailure("bad key in \(line)") }
        rest = rest[rest.index(after: eq)...]
        var value = ""
        if rest.first == "\"" {
            rest = rest.dropFirst()
            var escaped = false
            var closed = false
            while let ch = rest.first {
                rest = rest.dropFirst()
                if escaped { value.append(ch); escaped = false } else if ch == "\\" { escaped = true } else if ch == "\"" { closed = true; break } else { value.append(ch) }
            }
            guard closed else { throw TestFailure("unclosed quote in \(line)") }
        } else {
            let end = rest.firstIndex(of: " ") ?? rest.endIndex
            value = String(rest[..<end])
            rest = rest[end...]
        }
        pairs[key] = value
        if rest.first == " " { rest = rest.dropFirst() } else if !rest.isEmpty { throw TestFailure("junk after value in \(line)") }
    }
    return pairs
}

/// The repository root, from this file's location.
func repositoryRoot(_ file: String = #filePath) -> String {
    var parts = file.split(separator: "/", omittingEmptySubsequences: false)
    parts.removeLast(3)
    return parts.joined(separator: "/")
}

/// Scrapes /metrics and parses it with prometheus_client's own text parser; prints
/// `name{labels} value` per sample, and `histogram_types N` for the histogram families.
let prometheusParser = """
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://" + sys.argv[1] + "/metrics").read().decode()
histograms = 0
for family in text_string_to_metric_families(text):
    if family.type == "histogram":
        histograms += 1
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{s.name}{{{labels}}} {s.value}" if labels else f"{s.name} {s.value}")
print("histogram_types", histograms)
"""
