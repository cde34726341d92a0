import CPostgres
import Glibc
import ProfileSystem

/// One notification delivered to a connection that listens (`LISTEN channel`).
///
/// Threading: a plain value; any thread.
public struct PostgresNotification: Sendable, Equatable {
    public var channel: String
    public var payload: [UInt8]
    /// The backend that sent it (its connection's `backendPID`).
    public var senderPID: Int32

    public init(channel: String, payload: [UInt8], senderPID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderPID = senderPID
    }
}

/// One libpq connection, non-blocking throughout: every call takes a deadline (an absolute
/// `monotonicNanos()` value) and returns or throws by it, whatever the server or the network
/// does, so a hung server or a half-open connection cannot hang the calling thread.
///
/// Parameters and results travel in PostgreSQL's text format, in UTF-8 (the connection sets
/// `client_encoding`). A server error leaves the connection usable; a deadline that passes, a
/// broken connection or a libpq failure closes it for good (`isBroken`), and its owner opens a
/// new one. The server's notices (WARNING, NOTICE) are dropped, where libpq would print them
/// on stderr.
///
/// Host names are resolved by libpq with a blocking `getaddrinfo`, bounded by the resolver's
/// own timeouts rather than the deadline; an IP address or a socket directory avoids it.
///
/// Threading: one thread at a time. It may be handed from thread to thread (a pool lending it
/// out), never used by two at once.
public final class PostgresConnection: @unchecked Sendable {
    /// The PGconn; nil once closed, which this object alone does.
    private var handle: OpaquePointer?
    /// The last FATAL message the server sent outside a query (libpq passes it to the notice
    /// receiver), which says why the server is about to close the connection.
    private let farewell: Farewell
    /// Why the connection was closed, for calls made after that.
    private var closedBecause = "the connection was closed"
    /// The server, named for error messages.
    public let server: String
    /// The process ID of the server's backend for this connection (`pg_backend_pid()`), to
    /// find it in `pg_stat_activity` or to signal it; kept after the connection is closed.
    public let backendPID: Int32

    /// True once the connection broke, timed out or was closed: every call then throws
    /// `.connectionLost`, and the owner should open a new connection.
    public var isBroken: Bool { handle == nil }

    /// Opens a connection, waiting for it at most until `deadline`.
    ///
    /// - Parameters:
    ///   - conninfo: a libpq connection string, `key=value ...` or a `postgresql://` URI (or a
    ///     bare database name); what it leaves out comes from the `PG*` variables and libpq's
    ///     defaults, a password also from the password file.
    ///   - applicationName: the `application_name` the server shows in `pg_stat_activity`;
    ///     overrides one in `conninfo`.
    ///   - deadline: an absolute `monotonicNanos()` value.
    /// - Throws: `.connect`, with a message that names the server and leaves the password out.
    public init(conninfo: String, applicationName: String, deadline: Int) throws(PostgresError) {
        if let problem = connectionStringProblem(conninfo) {
            throw PostgresError(kind: .connect, message: problem, server: "")
        }
        // With expand_dbname, the first dbname is expanded as a connection string; the
        // keywords after it override what the string sets.
        let keywords = ["dbname", "application_name", "client_encoding"]
        let values = [conninfo, applicationName, "UTF8"]
        let started = withCStringArray(keywords) { keywords in
            withCStringArray(values) { values in PQconnectStartParams(keywords, values, 1) }
        }
        guard let connection = started else {
            throw PostgresError(kind: .connect, message: "libpq could not allocate a connection", server: "")
        }
        // Outlives the PGconn: both belong to this object, which frees the PGconn first.
        let farewell = Farewell()
        PQsetNoticeReceiver(connection, receiveNotice, Unmanaged.passUnretained(farewell).toOpaque())
        var polling = PQstatus(connection) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING
        while polling != PGRES_POLLING_OK {
            let events: Int16
            switch polling {
            case PGRES_POLLING_READING: events = Int16(POLLIN)
            case PGRES_POLLING_WRITING: events = Int16(POLLOUT)
            default:
                let error = PostgresError(kind: .connect,
                                          message: connectFailureReason(String(cString: PQerrorMessage(connection))),
                                          server: serverName(connection))
                PQfinish(connection)
                throw error
            }
            // The socket may change between calls: libpq tries each address in turn.
            guard waitForSocket(PQsocket(connection), events, until: deadline) != 0 else {
                let error = PostgresError(kind: .connect, message: "no answer before the deadline",
                                          server: serverName(connection))
                PQfinish(connection)
                throw error
            }
            polling = PQconnectPoll(connection)
        }
        guard PQsetnonblocking(connection, 1) == 0 else {
            let error = PostgresError(kind: .connect, message: "libpq could not make the connection non-blocking",
                                      server: serverName(connection))
            PQfinish(connection)
            throw error
        }
        handle = connection
        self.farewell = farewell
        server = serverName(connection)
        backendPID = PQbackendPID(connection)
    }

    deinit {
        close()
    }

    /// Closes the connection; calling it again does nothing. Whatever the server was running
    /// for it runs on until the server notices (use `query`'s deadline to cancel instead).
    public func close() {
        guard let connection = handle else { return }
        handle = nil
        // Non-blocking: the goodbye message is sent if the socket takes it at once.
        PQfinish(connection)
    }

    /// Runs one statement with text parameters (`$1`, `$2`, ...) and returns its rows.
    ///
    /// - Parameters:
    ///   - sql: exactly one statement.
    ///   - parameters: the values of `$1`, `$2`, ... in the text format; nil is SQL NULL.
    ///     Text cannot hold a zero byte: a parameter with one is refused before anything is
    ///     sent, with the SQLSTATE PostgreSQL gives such text (22021).
    ///   - deadline: an absolute `monotonicNanos()` value.
    /// - Throws: `.server(sqlstate:)` when the server refuses the statement; `.timeout` when
    ///   the deadline passes first (the backend is asked to cancel it and the connection is
    ///   closed); `.connectionLost` when the connection breaks, or had broken before.
    public func query(_ sql: String, _ parameters: [[UInt8]?] = [], deadline: Int) throws(PostgresError) -> PostgresResult {
        guard let connection = handle else { throw lost(closedBecause) }
        if parameters.contains(where: { $0.map(holdsZeroByte) ?? false }) {
            throw PostgresError(kind: .server(sqlstate: "22021"),
                                message: "a parameter holds a zero byte, which text cannot", server: server)
        }
        guard send(connection, sql, parameters) else { throw lostNow(connection) }
        try flush(connection, deadline: deadline)
        return try receive(connection, deadline: deadline)
    }

    /// Sends several statements at once in libpq's pipeline mode and reads their results: one
    /// round trip where `query` would take one per statement. The server runs them in order,
    /// each as `query` would; once one fails, it skips the rest.
    ///
    /// - Parameter statements: each exactly one statement and its parameters, as `query` takes them.
    /// - Returns: each statement's rows, in order.
    /// - Throws: as `query` does; a server's refusal is thrown once every result has been
    ///   read, so that the connection is idle again (inside a transaction, the caller rolls
    ///   it back).
    public func pipeline(_ statements: [(sql: String, parameters: [[UInt8]?])], deadline: Int) throws(PostgresError) -> [PostgresResult] {
        guard let connection = handle else { throw lost(closedBecause) }
        if statements.contains(where: { $0.parameters.contains(where: { $0.map(holdsZeroByte) ?? false }) }) {
            throw PostgresError(kind: .server(sqlstate: "22021"),
                                message: "a parameter holds a zero byte, which text cannot", server: server)
        }
        guard PQenterPipelineMode(connection) == 1 else { throw lostNow(connection) }
        for statement in statements {
            guard send(connection, statement.sql, statement.parameters) else { throw lostNow(connection) }
        }
        guard PQpipelineSync(connection) == 1 else { throw lostNow(connection) }
        try flush(connection, deadline: deadline)
        var results: [PostgresResult] = []
        var refusal: PostgresError?
        for _ in statements {
            do throws(PostgresError) {
                results.append(try receive(connection, deadline: deadline))
            } catch {
                // A refusal leaves the connection reading on; anything else closed it.
                guard case .server = error.kind else { throw error }
                refusal = refusal ?? error
            }
        }
        try awaitPipelineSync(connection, deadline: deadline)
        guard PQexitPipelineMode(connection) == 1 else { throw lostNow(connection) }
        if let refusal { throw refusal }
        return results
    }

    /// Reads up to the pipeline's synchronization point.
    private func awaitPipelineSync(_ connection: OpaquePointer, deadline: Int) throws(PostgresError) {
        while true {
            while PQisBusy(connection) != 0 {
                guard waitForSocket(PQsocket(connection), Int16(POLLIN), until: deadline) != 0 else { throw timedOut(connection) }
                guard PQconsumeInput(connection) != 0 else { throw lostNow(connection) }
            }
            guard let result = PQgetResult(connection) else {
                // Between results: the sync has not arrived yet.
                guard waitForSocket(PQsocket(connection), Int16(POLLIN), until: deadline) != 0 else { throw timedOut(connection) }
                guard PQconsumeInput(connection) != 0 else { throw lostNow(connection) }
                continue
            }
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { return }
        }
    }

    /// Runs one statement without parameters and ignores its rows: BEGIN, COMMIT, LISTEN, SET.
    ///
    /// - Throws: as `query` does.
    public func execute(_ sql: String, deadline: Int) throws(PostgresError) {
        _ = try query(sql, deadline: deadline)
    }

    /// The notifications that arrived for the channels this connection listens to, in the
    /// order the server sent them (the order their transactions committed), waiting until at
    /// least one is there or the deadline passes.
    ///
    /// Notifications that arrived during earlier queries are returned first, without waiting.
    ///
    /// - Returns: the notifications, at least one; none when the deadline passed first.
    /// - Throws: `.connectionLost` when the server closed the connection (it was terminated,
    ///   or the server shut down) or it broke.
    public func notifications(until deadline: Int) throws(PostgresError) -> [PostgresNotification] {
        guard let connection = handle else { throw lost(closedBecause) }
        var received: [PostgresNotification] = []
        while true {
            // PQnotifies only parses what was read already: read what the socket holds first.
            guard PQconsumeInput(connection) != 0 else { throw lostNow(connection) }
            while let notification = PQnotifies(connection) {
                received.append(PostgresNotification(
                    channel: String(cString: notification.pointee.relname),
                    payload: Array(UnsafeRawBufferPointer(start: notification.pointee.extra,
                                                          count: strlen(notification.pointee.extra))),
                    senderPID: notification.pointee.be_pid))
                PQfreemem(notification)
            }
            if !received.isEmpty { return received }
            guard waitForSocket(PQsocket(connection), Int16(POLLIN), until: deadline) != 0 else { return [] }
        }
    }

    /// Queues the statement in libpq's output buffer; false when libpq refuses (the
    /// connection is bad).
    private func send(_ connection: OpaquePointer, _ sql: String, _ parameters: [[UInt8]?]) -> Bool {
        // Without parameters there is no buffer to build: an array made with a capacity of 0
        // writes its count into the runtime's one shared empty array, a race between threads.
        guard !parameters.isEmpty else { return PQsendQueryParams(connection, sql, 0, nil, nil, nil, nil, 0) == 1 }
        // One buffer holds every parameter, each followed by the zero byte that ends a C string.
        var offsets: [Int?] = []
        offsets.reserveCapacity(parameters.count)
        let total = parameters.reduce(0) { $0 + ($1?.count ?? 0) + 1 }
        let storage = [CChar](unsafeUninitializedCapacity: total) { buffer, count in
            let base = UnsafeMutableRawPointer(buffer.baseAddress)
            for parameter in parameters {
                guard let parameter else {
                    offsets.append(nil)
                    continue
                }
                offsets.append(count)
                parameter.withUnsafeBytes { bytes in
                    if let source = bytes.baseAddress { base!.advanced(by: count).copyMemory(from: source, byteCount: bytes.count) }
                }
                count += parameter.count
                buffer[count] = 0
                count += 1
            }
        }
        return storage.withUnsafeBufferPointer { buffer in
            let values = offsets.map { offset in offset.map { UnsafePointer(buffer.baseAddress! + $0) } }
            return PQsendQueryParams(connection, sql, Int32(parameters.count), nil, values, nil, nil, 0) == 1
        }
    }

    /// Sends what libpq holds in its output buffer, reading meanwhile so that a server that
    /// is itself blocked writing cannot deadlock with us.
    private func flush(_ connection: OpaquePointer, deadline: Int) throws(PostgresError) {
        while true {
            switch PQflush(connection) {
            case 0: return
            case 1: break
            default: throw lostNow(connection)
            }
            let ready = waitForSocket(PQsocket(connection), Int16(POLLIN | POLLOUT), until: deadline)
            guard ready != 0 else { throw timedOut(connection) }
            if ready & Int16(POLLIN) != 0 && PQconsumeInput(connection) == 0 { throw lostNow(connection) }
        }
    }

    /// Reads every result of the statement in flight, up to libpq's end marker (a null
    /// result), so that the connection is idle again when this returns or throws a server
    /// error.
    private func receive(_ connection: OpaquePointer, deadline: Int) throws(PostgresError) -> PostgresResult {
        var rows: PostgresResult?
        var refusal: PostgresError?
        while true {
            while PQisBusy(connection) != 0 {
                guard waitForSocket(PQsocket(connection), Int16(POLLIN), until: deadline) != 0 else {
                    throw timedOut(connection)
                }
                guard PQconsumeInput(connection) != 0 else { throw lostNow(connection, reason: refusal?.message) }
            }
            guard let result = PQgetResult(connection) else { break }
            defer { PQclear(result) }
            switch PQresultStatus(result) {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                rows = PostgresResult(result)
            case PGRES_PIPELINE_ABORTED:
                // Skipped: an earlier statement of the pipeline failed, and that is the error.
                refusal = refusal ?? PostgresError(kind: .server(sqlstate: "25P02"),
                                                   message: "skipped after an earlier statement of the pipeline failed", server: server)
            case PGRES_FATAL_ERROR:
                // An error libpq made itself has no SQLSTATE: the connection, not the statement,
                // failed, and it is closed below.
                guard let sqlstate = errorField(result, profiled_pg_diag_sqlstate()),
                      PQstatus(connection) == CONNECTION_OK else {
                    throw lostNow(connection, reason: errorField(result, profiled_pg_diag_message_primary()))
                }
                refusal = refusal ?? PostgresError(
                    kind: .server(sqlstate: sqlstate),
                    message: errorField(result, profiled_pg_diag_message_primary()).map(phrase) ?? "no reason given",
                    server: server)
            default:
                // COPY would leave the connection waiting for data this class never sends.
                let status = String(cString: PQresStatus(PQresultStatus(result)))
                throw lostNow(connection, reason: "the statement started a COPY (\(status)), which this connection does not run")
            }
        }
        if PQstatus(connection) != CONNECTION_OK { throw lostNow(connection, reason: refusal?.message) }
        if let refusal { throw refusal }
        guard let rows else { throw lostNow(connection, reason: "the server sent no result") }
        return rows
    }

    /// A field of an error result, nil when absent.
    private func errorField(_ result: OpaquePointer, _ field: Int32) -> String? {
        PQresultErrorField(result, field).map { String(cString: $0) }
    }

    /// Closes the connection because the deadline passed, after asking the server to cancel
    /// what its backend runs: otherwise a long statement would run on, holding its locks.
    private func timedOut(_ connection: OpaquePointer) -> PostgresError {
        if let cancel = PQgetCancel(connection) { sendCancel(cancel) }
        closedBecause = "the connection was closed when an earlier call ran out of time"
        close()
        return PostgresError(kind: .timeout, message: "the statement was cancelled and the connection closed",
                             server: server)
    }

    /// Closes the broken connection; the error says why it broke: `reason`, else the server's
    /// farewell, else libpq's message.
    private func lostNow(_ connection: OpaquePointer, reason: String? = nil) -> PostgresError {
        let why = reason.map(phrase) ?? farewell.message ?? phrase(String(cString: PQerrorMessage(connection)))
        closedBecause = "the connection was closed after it broke (\(why))"
        close()
        return lost(why)
    }

    private func lost(_ why: String) -> PostgresError {
        PostgresError(kind: .connectionLost, message: why, server: server)
    }
}

/// The FATAL message a server sends before it closes a connection (terminated by an
/// administrator, shutting down), which libpq hands to the notice receiver when no query runs.
///
/// Threading: belongs to its connection's thread.
private final class Farewell {
    var message: String?
}

/// The notice receiver: keeps a FATAL message for the error that follows, drops the rest.
private func receiveNotice(_ context: UnsafeMutableRawPointer?, _ result: OpaquePointer?) {
    guard let context, let result,
          let severity = PQresultErrorField(result, profiled_pg_diag_severity()),
          String(cString: severity) == "FATAL" || String(cString: severity) == "PANIC",
          let message = PQresultErrorField(result, profiled_pg_diag_message_primary()) else { return }
    Unmanaged<Farewell>.fromOpaque(context).takeUnretainedValue().message = phrase(String(cString: message))
}

/// A PGcancel on its way to the thread that sends it.
private final class PendingCancel: @unchecked Sendable {
    let handle: OpaquePointer
    init(_ handle: OpaquePointer) { self.handle = handle }
}

/// Sends a cancel request from a thread of its own, which then exits. libpq 15's PQcancel
/// opens a new connection to the server and blocks until the server takes the request, which
/// a hung or unreachable server never does; the caller must not wait for that. At most one
/// such thread per connection that timed out.
private func sendCancel(_ cancel: OpaquePointer) {
    let pending = PendingCancel(cancel)
    guard let thread = tryStartThread("postgres cancel", {
        var error = [CChar](repeating: 0, count: 256)
        _ = PQcancel(pending.handle, &error, Int32(error.count))
        PQfreeCancel(pending.handle)
    }) else {
        PQfreeCancel(cancel)
        return
    }
    pthread_detach(thread)
}

/// Waits until `socket` is ready for `events` (POLLIN, POLLOUT) or the deadline passes.
///
/// - Returns: the events that are ready, including POLLERR and POLLHUP, which libpq's next
///   call turns into an error; 0 when the deadline passed first.
func waitForSocket(_ socket: Int32, _ events: Int16, until deadline: Int) -> Int16 {
    guard socket >= 0 else { return Int16(POLLHUP) }
    var entry = pollfd(fd: socket, events: events, revents: 0)
    while true {
        let remaining = deadline - monotonicNanos()
        // Rounded up, so that poll does not wake just before the deadline and spin.
        let milliseconds = remaining <= 0 ? 0 : Int32(clamping: (remaining + 999_999) / 1_000_000)
        let ready = poll(&entry, 1, milliseconds)
        if ready > 0 { return entry.revents }
        if ready < 0 && errno != EINTR { return Int16(POLLERR) }
        if ready == 0 && remaining <= 0 { return 0 }
    }
}

/// Whether `bytes` holds a zero byte, where libpq would take a text parameter to end.
private func holdsZeroByte(_ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { buffer in buffer.baseAddress.map { memchr($0, 0, buffer.count) != nil } ?? false }
}

/// Calls `body` with `strings` as a null-terminated array of C strings.
private func withCStringArray<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
