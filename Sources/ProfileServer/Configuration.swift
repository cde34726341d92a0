import ProfileTLS

/// profiled's version, as `--version`, INFO and the package give it.
public let profiledVersion = "0.1.0"

/// Everything profiled needs to start, already validated by the executable's argument parser.
///
/// A plain value: any thread may read it.
public struct ServerConfiguration: Sendable {
    /// TCP address and port to listen on; a nil port leaves the plain line-protocol listener off.
    public var host: String = "127.0.0.1"
    public var port: UInt16? = 7711
    /// Optional Unix domain socket path.
    public var unixPath: String? = nil
    /// The RESP listener's port on `host`; nil leaves it off.
    public var respPort: UInt16? = nil
    /// The TLS listeners' ports on `host` (line protocol, RESP); nil leaves each off.
    public var tlsPort: UInt16? = nil
    public var respTLSPort: UInt16? = nil
    /// The TLS listeners' certificate, key, CA and what they accept; set when either TLS port is.
    public var tls: TLSServerSettings? = nil
    /// How long a TLS client has from accept to the end of its handshake before it is closed.
    public var tlsHandshakeTimeoutSeconds: Int = 10
    /// What every RESP key starts with before its userId (`user:`); empty: the key is the userId.
    public var respKeyPrefix: [UInt8] = []
    public var cacheMegabytes: Int = 256
    /// Worker threads; 0 means one per core.
    public var threads: Int = 0
    public var tokensPath: String? = nil
    public var maxConnections: Int = 10_000
    /// `--max-line`, the line protocol's longest request line: its codec's
    /// `Limits.defaultMaxLine` unless set (a test holds the two equal). Workers read that much
    /// at once.
    public var maxLine: Int = 65536
    public var allowInsecureBind: Bool = false
    /// The most memory all client connections together may hold (input, unsent and held
    /// replies, queued transactions), in bytes; past it the connection holding the most is
    /// closed. 0: no limit.
    public var maxClientMemory: Int = 256 << 20
    /// The most keys client-side caching remembers for all clients (`tracking-table-max-keys`);
    /// past it, random keys are forgotten and their readers told they changed.
    public var trackingTableMaxKeys: Int = 1_000_000
    /// Where to serve /metrics and /healthz over HTTP; nil leaves them off.
    public var metricsAddress: (host: String, port: UInt16)? = nil
    /// Serve them over TLS (HTTPS), with the TLS listeners' certificate and client checks.
    public var metricsTLS: Bool = false

    public init() {}

    /// When connections move between the workers' loops.
    var loopPolicy = LoopPolicy.standard

    /// Requests one connection may have answered per wake-up before others get a turn.
    package var requestsPerWakeup: Int { 512 }
    /// Unsent reply bytes past which a connection is no longer read from (backpressure).
    var outputHighWater: Int { 1 << 20 }
    /// Unsent reply bytes past which a connection is closed: a client that never reads.
    var outputHardLimit: Int { 64 << 20 }
}

extension ServerConfiguration {
    /// Why these settings may not be served, or nil: without tokens, anyone who can reach a
    /// non-loopback address could read and erase every profile (protected mode).
    public var insecureBindProblem: String? {
        guard tokensPath == nil && !allowInsecureBind else { return nil }
        // Where every listener on the host asks for a client certificate that chains to the
        // CA, the certificate authenticates the client.
        let certificatesRequired = tls?.clientAuthentication == .yes && port == nil && respPort == nil
        if !isLoopback(host: host) && !certificatesRequired {
            return "refusing to listen on \(host) without --tokens: anyone who can reach it could read and erase every profile (use --tokens FILE, TLS alone with --tls-auth-clients yes and --port off, or --allow-insecure-bind if the network is trusted)"
        }
        if let metrics = metricsAddress, !isLoopback(host: metrics.host) {
            return "refusing to serve metrics on \(metrics.host) without --tokens (use a loopback address, or --allow-insecure-bind if the network is trusted)"
        }
        return nil
    }
}

/// Whether a host name or address is loopback: 127.0.0.0/8, ::1 or `localhost`.
public func isLoopback(host: String) -> Bool {
    if host == "localhost" || host == "::1" || host == "[::1]" { return true }
    let parts = host.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 4, parts.allSatisfy({ UInt8($0) != nil }) else { return false }
    return parts[0] == "127"
}
