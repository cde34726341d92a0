import COpenSSL
import Glibc

/// A TLS setting or file that cannot be used: one sentence naming the file and OpenSSL's reason.
///
/// A plain value; any thread may use it.
public struct TLSError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }

    /// `what` followed by the reasons OpenSSL queued on this thread, which it clears.
    static func openSSL(_ what: String) -> TLSError {
        let reasons = takeErrorQueue()
        return TLSError(reasons.isEmpty ? what : "\(what): \(reasons)")
    }
}

/// The TLS versions a side accepts, as Redis's `tls-protocols` names them.
///
/// A plain value; any thread may use it.
public struct TLSProtocols: Sendable, Equatable {
    public var lowest: Version
    public var highest: Version

    public enum Version: Int, Sendable, Comparable {
        case tls12 = 12
        case tls13 = 13

        public static func < (a: Version, b: Version) -> Bool { a.rawValue < b.rawValue }

        var openSSL: Int32 { self == .tls12 ? profiled_tls1_2_version() : profiled_tls1_3_version() }
    }

    /// TLS 1.2 and 1.3: what Redis enables by default; TLS 1.1 and older are refused.
    public static let standard = TLSProtocols(lowest: .tls12, highest: .tls13)

    public init(lowest: Version, highest: Version) {
        self.lowest = lowest
        self.highest = highest
    }

    /// Parses `"TLSv1.2 TLSv1.3"` (blank-separated, any case). Nil for an empty list or a
    /// version other than these two, so a typo never silently weakens the setting.
    public init?(parsing text: String) {
        var versions: [Version] = []
        for word in text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," }) {
            switch word.lowercased() {
            case "tlsv1.2": versions.append(.tls12)
            case "tlsv1.3": versions.append(.tls13)
            default: return nil
            }
        }
        guard let lowest = versions.min(), let highest = versions.max() else { return nil }
        self.init(lowest: lowest, highest: highest)
    }
}

/// Whether a server asks for, and requires, a client certificate (Redis's `tls-auth-clients`).
///
/// A plain value; any thread may use it.
public enum TLSClientAuthentication: String, Sendable {
    /// A certificate is required and must chain to the CA: the handshake fails without one.
    case yes
    /// No certificate is asked for.
    case no
    /// A certificate is asked for; one that is sent must chain to the CA.
    case optional
}

/// What a server's TLS needs: its certificate and key, the CA that client certificates must
/// chain to, and what it accepts.
///
/// A plain value; any thread may use it.
public struct TLSServerSettings: Sendable, Equatable {
    public var certificateFile: String
    public var keyFile: String
    /// Client certificates are checked against it; required unless `clientAuthentication` is `.no`.
    public var caCertificateFile: String?
    public var clientAuthentication: TLSClientAuthentication = .no
    public var protocols: TLSProtocols = .standard
    /// TLS 1.3 suites, OpenSSL's colon-separated names; nil keeps OpenSSL's default.
    public var ciphersuites: String?
    /// TLS 1.2 ciphers, OpenSSL's cipher list; nil keeps OpenSSL's default.
    public var ciphers: String?

    public init(certificateFile: String, keyFile: String) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}

/// An OpenSSL context made from settings: the certificate, key and CA as they were read when
/// it was made. Connections made from it keep it alive, so replacing it (a certificate
/// rotation) leaves open connections as they are.
///
/// Immutable once made; any thread may make sessions from it (OpenSSL locks what it shares).
public final class TLSContext: @unchecked Sendable {
    let context: OpaquePointer

    /// Reads the files and checks that the key matches the certificate.
    public init(server settings: TLSServerSettings) throws(TLSError) {
        context = try Self.makeContext(method: TLS_server_method(), protocols: settings.protocols)
        // A throw from here on frees the context in deinit.
        try configure(settings)
    }

    /// A client's context: certificates are checked against `caCertificateFile` (the system's
    /// CAs when nil), unless `verifyPeer` is false; `certificateFile` and `keyFile` are sent
    /// when the server asks for a client certificate.
    public init(clientCA caCertificateFile: String?, certificateFile: String?, keyFile: String?,
                verifyPeer: Bool = true, protocols: TLSProtocols = .standard) throws(TLSError) {
        context = try Self.makeContext(method: TLS_client_method(), protocols: protocols)
        // A throw from here on frees the context in deinit.
        if let caCertificateFile {
            guard SSL_CTX_load_verify_locations(context, caCertificateFile, nil) == 1 else {
                throw TLSError.openSSL("cannot read the CA certificate file \(caCertificateFile)")
            }
        } else if verifyPeer {
            SSL_CTX_set_default_verify_paths(context)
        }
        SSL_CTX_set_verify(context, verifyPeer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nil)
        if certificateFile != nil || keyFile != nil {
            guard let certificateFile, let keyFile else {
                throw TLSError("a client certificate needs both the certificate and its key")
            }
            try useCertificate(certificateFile, key: keyFile)
        }
    }

    deinit { SSL_CTX_free(context) }

    private static func makeContext(method: OpaquePointer?, protocols: TLSProtocols) throws(TLSError) -> OpaquePointer {
        ERR_clear_error()
        guard let context = SSL_CTX_new(method) else { throw TLSError.openSSL("cannot make a TLS context") }
        profiled_ssl_ctx_set_profiled_modes(context)
        profiled_ssl_ctx_disable_session_cache(context)
        guard profiled_ssl_ctx_set_protocol_range(context, protocols.lowest.openSSL, protocols.highest.openSSL) == 1 else {
            SSL_CTX_free(context)
            throw TLSError.openSSL("cannot set the TLS versions")
        }
        return context
    }

    private func configure(_ settings: TLSServerSettings) throws(TLSError) {
        try useCertificate(settings.certificateFile, key: settings.keyFile)
        if let ciphersuites = settings.ciphersuites, SSL_CTX_set_ciphersuites(context, ciphersuites) != 1 {
            throw TLSError.openSSL("no usable TLS 1.3 cipher suite in '\(ciphersuites)'")
        }
        if let ciphers = settings.ciphers, SSL_CTX_set_cipher_list(context, ciphers) != 1 {
            throw TLSError.openSSL("no usable TLS 1.2 cipher in '\(ciphers)'")
        }
        if let ca = settings.caCertificateFile {
            guard SSL_CTX_load_verify_locations(context, ca, nil) == 1 else {
                throw TLSError.openSSL("cannot read the CA certificate file \(ca)")
            }
            // The CAs named to clients in the certificate request, so that a client holding
            // several certificates picks one this server accepts.
            if let names = SSL_load_client_CA_file(ca) { SSL_CTX_set_client_CA_list(context, names) }
        } else if settings.clientAuthentication != .no {
            throw TLSError("checking client certificates needs the CA certificate file they chain to")
        }
        switch settings.clientAuthentication {
        case .yes: SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
        case .optional: SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        case .no: SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        }
    }

    private func useCertificate(_ certificateFile: String, key keyFile: String) throws(TLSError) {
        guard SSL_CTX_use_certificate_chain_file(context, certificateFile) == 1 else {
            throw TLSError.openSSL("cannot read the certificate file \(certificateFile)")
        }
        guard SSL_CTX_use_PrivateKey_file(context, keyFile, SSL_FILETYPE_PEM) == 1 else {
            let reasons = takeErrorQueue()
            if reasons.contains("key values mismatch") {
                throw TLSError("the key in \(keyFile) does not match the certificate in \(certificateFile)")
            }
            throw TLSError("cannot read the key file \(keyFile)" + (reasons.isEmpty ? "" : ": \(reasons)"))
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            throw TLSError.openSSL("the key in \(keyFile) does not match the certificate in \(certificateFile)")
        }
    }

    /// A session over the connected socket `fd`, which the caller keeps owning; nil when
    /// OpenSSL has no memory for one.
    public func session(fd: Int32, accepting: Bool, serverName: String? = nil) -> TLSSession? {
        ERR_clear_error()
        guard let ssl = SSL_new(context) else { return nil }
        guard SSL_set_fd(ssl, fd) == 1 else {
            SSL_free(ssl)
            return nil
        }
        if accepting {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            if let serverName {
                // SNI carries host names only; verification checks whichever the name is.
                if serverName.contains(where: { $0.isLetter }) { _ = profiled_ssl_set_host_name(ssl, serverName) }
                let param = SSL_get0_param(ssl)
                if serverName.allSatisfy({ $0.isNumber || $0 == "." || $0 == ":" }) {
                    X509_VERIFY_PARAM_set1_ip_asc(param, serverName)
                } else {
                    X509_VERIFY_PARAM_set1_host(param, serverName, 0)
                }
            }
        }
        return TLSSession(ssl: ssl)
    }
}

/// Takes every error OpenSSL queued on this thread, as one line of its reasons.
func takeErrorQueue() -> String {
    var reasons: [String] = []
    var buffer = [CChar](repeating: 0, count: 256)
    while true {
        let code = ERR_get_error()
        guard code != 0 else { break }
        ERR_error_string_n(code, &buffer, buffer.count)
        let text = string(fromTerminated: buffer)
        // "error:0A000086:SSL routines::certificate verify failed": the reason is the last part.
        let reason = text.split(separator: ":", omittingEmptySubsequences: false).last.map(String.init) ?? text
        // "system lib" only says that the reason before it came from the C library, and a file
        // that is not there comes as the C library's words and then as OpenSSL's own.
        let lower = reason.lowercased()
        let said = reasons.contains { $0.lowercased().hasPrefix(lower) || lower.hasPrefix($0.lowercased()) }
        if reason != "system lib" && !said { reasons.append(reason) }
    }
    return reasons.joined(separator: "; ")
}

/// The text of a NUL-terminated C buffer.
func string(fromTerminated buffer: [CChar]) -> String {
    let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}
