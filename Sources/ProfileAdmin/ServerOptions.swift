import Glibc
import ProfileClient

/// How to reach a running profiled: `--host`, `--port`, `--unix`, `--token`
/// (or `PROFILED_TOKEN` in the environment), and TLS (`--tls` and its files).
///
/// Threading: a plain value; any thread.
public struct ServerOptions: Sendable, Equatable {
    public var host = "127.0.0.1"
    public var port: UInt16 = 7711
    public var unixPath: String? = nil
    public var token: String? = nil
    /// Set: connect over TLS.
    public var tls: TLSClientOptions? = nil

    public init() {}

    public var endpoint: Endpoint {
        if let unixPath { return .unix(path: unixPath) }
        return .tcp(host: host, port: port)
    }

    /// Connects and authenticates when a token is given.
    public func connect() throws(AdminError) -> ProfileConnection {
        do {
            let connection = try ProfileConnection(endpoint, tls: tls)
            if let token { try connection.auth(token) }
            return connection
        } catch .server(let code, let message) {
            throw AdminError.server(code: code, message: message)
        } catch {
            throw AdminError.file("\(error)")
        }
    }
}
