import CommandLineFlags
import ProfileClient

/// How ids are drawn from the key space.
public enum KeyDistribution: Sendable, Equatable, CustomStringConvertible {
    case uniform
    /// Rank k (id k-1) with probability proportional to 1/k^s.
    case zipf(exponent: Double)

    public var description: String {
        switch self {
        case .uniform: "uniform"
        case .zipf(let s): "zipf:\(s)"
        }
    }
}

/// Everything one profilebench run does, from its command line.
///
/// A plain value: any thread may read it.
public struct BenchOptions: Sendable {
    public var target: TargetProtocol = .profiled
    public var host = "127.0.0.1"
    /// nil: the target protocol's usual port.
    public var port: UInt16? = nil
    public var unixPath: String? = nil
    public var token: String? = nil
    /// Set: every connection is TLS (`--tls` and its files).
    public var tls: TLSClientOptions? = nil
    public var connections = 50
    public var pipeline = 1
    public var threads = 1
    public var durationSeconds = 10.0
    /// When set, the run ends after this many requests instead of after `durationSeconds`.
    public var requests: Int? = nil
    public var keys = 100_000
    public var distribution = KeyDistribution.uniform
    public var mix = OperationMix([(.get, 100)])
    public var mgetSize = 16
    public var missRatio = 0.0
    public var preload = false
    /// Read the whole key space once (after `preload`), so the server holds it in memory.
    public var warm = false
    /// Requests per second over all connections (open loop); nil: closed loop.
    public var rate: Int? = nil
    public var valueSize = 100
    public var json = false
    public var seed: UInt64 = 1

    public init() {}

    public var endpointDescription: String {
        if let unixPath { return "\(target)://unix:\(unixPath)" }
        return "\(target)://\(host):\(port ?? target.defaultPort)"
    }
}

public let helpText = """
usage: profilebench [options]
Drives a running profiled (or memcached, or Redis) on loopback and reports per operation
requests/s, errors and latency percentiles, and the harness's own CPU use.
  --target URL        profiled://HOST:PORT (default 127.0.0.1:7711), memcached://HOST:PORT,
                      redis://HOST:PORT (a profile is one string), or resp://HOST:PORT (a profile
                      is a hash of name and portraitUri: profiled's RESP front, or any Redis);
                      a bare profiled, memcached, redis or resp takes the usual port
  --host HOST         address to connect to (default 127.0.0.1)
  --port N            port to connect to
  --unix PATH         connect to a Unix domain socket instead
  --token T           AUTH with this token on every connection (profiled, redis, resp)
  --tls               connect over TLS (profiled's TLS listeners, or a Redis with TLS)
  --cacert FILE       the CA the server's certificate must chain to (default: the system's)
  --cert FILE         a client certificate, for a server that asks for one (with --key)
  --key FILE          the client certificate's private key
  --sni NAME          the name the server's certificate must carry (default: the host)
  --insecure          do not check the server's certificate
  --conns N           connections (default 50), spread over the threads
  --pipeline N        requests in flight per connection (default 1)
  --threads N         load threads (default 1)
  --duration S        seconds to run (default 10)
  --requests N        stop after N requests instead
  --keys N            ids in the key space (default 100000)
  --dist D            uniform (default) or zipf[:s] (s defaults to 0.99)
  --mix M             operations and weights (default get=100); operations: get, mget, set,
                      update, del, exists (memcached: get, mget, set, del; redis: no update),
                      hmget (resp only; resp has no mget: get is HGETALL, set HSET of both
                      fields, update HSET of name), and an operator's count, stats, recent
                      (RECENT 20) and scan (SCAN 100 from a random id), profiled only
  --mget-size N       ids per mget (default 16)
  --miss-ratio R      share of looked-up ids that do not exist, 0 to 1 (default 0)
  --preload           write the whole key space first (MSET batches; resp: pipelined HSETs)
                      and report its rate
  --warm              then read the whole key space once (MGET batches; resp: pipelined
                      HGETALLs), so every server holds it in memory before the run, and report
                      its rate
  --rate N            open loop: N requests/s in total, latency measured from when each
                      request was due (no coordinated omission); default: closed loop
  --value-size N      bytes of name plus portraitUri, or of the memcached/redis value (default 100)
  --seed N            seed of the id and operation choices (default 1)
  --json              print one JSON object instead of the table
  --help              show this help
Exit status: 0 when every request was answered without an error reply, 1 when the server
refused, closed, answered garbage or sent error replies, 64 for a bad command line.
"""

/// What the command line asks for.
public enum BenchCommand: Sendable {
    case run(BenchOptions)
    case help
}

extension BenchOptions {
    /// Parses profilebench's flags (`--flag value` or `--flag=value`) and checks they fit together.
    public static func parse(_ arguments: [String]) throws(UsageError) -> BenchCommand {
        var options = BenchOptions()
        // The flags given, for those that cannot go together.
        var given: Set<String> = []
        var targetAddress: String? = nil
        var caCertificate: String? = nil, certificate: String? = nil, key: String? = nil, serverName: String? = nil
        var reader = FlagReader(arguments, error: UsageError.init)
        while let flag = reader.nextFlag() {
            switch flag.spelling {
            case "--target":
                let text = try reader.value(of: flag)
                try options.setTarget(text)
                if text.contains("://") { targetAddress = text }
            case "--host":
                let host = try reader.value(of: flag)
                guard !host.isEmpty else { throw UsageError("--host needs an address") }
                options.host = host
            case "--port": options.port = UInt16(try reader.wholeNumber(of: flag, in: 1...65535))
            case "--unix":
                let path = try reader.value(of: flag)
                guard !path.isEmpty else { throw UsageError("--unix needs a path") }
                options.unixPath = path
            case "--token": options.token = try reader.value(of: flag)
            case "--tls", "--insecure": try reader.refuseValue(of: flag)
            case "--cacert": caCertificate = try reader.value(of: flag)
            case "--cert": certificate = try reader.value(of: flag)
            case "--key": key = try reader.value(of: flag)
            case "--sni": serverName = try reader.value(of: flag)
            case "--conns": options.connections = try reader.wholeNumber(of: flag, in: 1...10_000)
            case "--pipeline": options.pipeline = try reader.wholeNumber(of: flag, in: 1...4096)
            case "--threads": options.threads = try reader.wholeNumber(of: flag, in: 1...64)
            case "--duration": options.durationSeconds = try reader.decimalNumber(of: flag, in: 0.1...86_400)
            case "--requests": options.requests = try reader.wholeNumber(of: flag, in: 1...1_000_000_000_000)
            case "--keys": options.keys = try reader.wholeNumber(of: flag, in: 1...1_000_000_000)
            case "--dist": options.distribution = try parseDistribution(try reader.value(of: flag))
            case "--mix": options.mix = try OperationMix.parse(try reader.value(of: flag))
            case "--mget-size": options.mgetSize = try reader.wholeNumber(of: flag, in: 1...1000)
            case "--miss-ratio": options.missRatio = try reader.decimalNumber(of: flag, in: 0...1)
            case "--preload": try reader.refuseValue(of: flag); options.preload = true
            case "--warm": try reader.refuseValue(of: flag); options.warm = true
            case "--rate": options.rate = try reader.wholeNumber(of: flag, in: 1...100_000_000)
            case "--value-size": options.valueSize = try reader.wholeNumber(of: flag, in: 2...2304)
            case "--seed": options.seed = UInt64(try reader.wholeNumber(of: flag, in: 0...Int.max))
            case "--json": try reader.refuseValue(of: flag); options.json = true
            case "--help", "-h": return .help
            default: throw UsageError("unknown option '\(flag.spelling)'")
            }
            given.insert(flag.spelling)
        }
        if given.contains("--duration") && given.contains("--requests") {
            throw UsageError("--duration and --requests both say when the run ends: give one")
        }
        if let targetAddress, let flag = ["--host", "--port", "--unix"].first(where: given.contains) {
            throw UsageError("--target \(targetAddress) names the address, so \(flag) has no use with it")
        }
        if given.contains("--unix"), let flag = ["--host", "--port", "--tls"].first(where: given.contains) {
            throw UsageError("--unix connects to a socket, so \(flag) has no use with it")
        }
        do {
            options.tls = try TLSClientOptions.fromFlags(tls: given.contains("--tls"), caCertificate: caCertificate,
                                                         certificate: certificate, key: key, serverName: serverName,
                                                         insecure: given.contains("--insecure"))
        } catch {
            throw UsageError(error.message)
        }
        try options.check()
        return .run(options)
    }

    private mutating func setTarget(_ text: String) throws(UsageError) {
        let parts = text.split(separator: "://", maxSplits: 1, omittingEmptySubsequences: false)
        guard let target = TargetProtocol(rawValue: String(parts[0])) else {
            throw UsageError("--target: '\(text)' is not profiled://HOST:PORT, memcached://HOST:PORT, redis://HOST:PORT "
                             + "or resp://HOST:PORT")
        }
        self.target = target
        guard parts.count == 2 else { return }
        let address = parts[1]
        guard let colon = address.lastIndex(of: ":"), let port = UInt16(address[address.index(after: colon)...]), port > 0,
              colon > address.startIndex else {
            throw UsageError("--target: '\(text)' needs HOST:PORT after \(target)://")
        }
        host = String(address[..<colon])
        self.port = port
    }

    private static func parseDistribution(_ text: String) throws(UsageError) -> KeyDistribution {
        if text == "uniform" { return .uniform }
        if text == "zipf" { return .zipf(exponent: 0.99) }
        if text.hasPrefix("zipf:"), let s = Double(text.dropFirst(5)), s > 0, s <= 10 {
            return .zipf(exponent: s)
        }
        throw UsageError("--dist takes uniform, zipf or zipf:s with 0 < s <= 10, not '\(text)'")
    }

    private func check() throws(UsageError) {
        for entry in mix.weights where !target.supports(entry.operation) {
            switch (target, entry.operation) {
            case (.resp, .mget):
                throw UsageError("--mix: resp has no mget, since no command reads several hashes (hmget reads both fields of one)")
            case (.redis, .hmget):
                throw UsageError("--mix: redis has no hmget, since it stores each profile as one string (resp:// reads hashes)")
            default:
                throw UsageError("--mix: \(target) has no \(entry.operation)")
            }
        }
        if token != nil && target == .memcached { throw UsageError("--token: memcached's text protocol has no AUTH") }
        if tls != nil && target == .memcached { throw UsageError("--tls: only profiled, redis and resp targets are measured over TLS") }
        if threads > connections { throw UsageError("--threads \(threads) needs at least as many --conns") }
        if target == .profiled && mgetSize * (2 + KeySpace(keys: keys, valueSize: valueSize).idLength) > 60_000 {
            throw UsageError("--mget-size \(mgetSize) ids do not fit in one request line")
        }
    }
}
