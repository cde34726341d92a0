import Glibc

/// A Unix domain socket's address, `sockaddr_un`, built from a path once and checked for
/// length: the one place the server, the client library and the tools fill one in.
///
/// Threading: a plain value; any thread.
public struct UnixSocketAddress: Sendable {
    private var address = sockaddr_un()

    /// - Returns: nil when `path` (and its NUL) does not fit `sun_path` (108 bytes on Linux).
    public init?(path: String) {
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
            raw[pathBytes.count] = 0
        }
    }

    /// Calls `body` with the address as `connect` and `bind` take it.
    public func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}
