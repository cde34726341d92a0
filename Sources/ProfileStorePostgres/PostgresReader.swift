import ProfilePostgres
import ProfileStore
import ProfileSystem

/// A fetcher's reads of the shared store, on a connection of its own, opened again after a
/// failure (not sooner than 100 ms after a failed attempt, so an unreachable server is
/// answered at once instead of waited for by every read).
///
/// Threading: one fetcher thread.
final class PostgresReader: SharedProfileReader {
    private let store: PostgresProfileStore
    private var connection: PostgresConnection?
    private var lastFailedConnect = 0

    init(store: PostgresProfileStore) {
        self.store = store
    }

    deinit { connection?.close() }

    private func connected() throws(StoreError) -> PostgresConnection {
        if let connection, !connection.isBroken { return connection }
        connection = nil
        let now = monotonicNanos()
        guard now - lastFailedConnect > 100_000_000 || lastFailedConnect == 0 else {
            throw StoreError(kind: .unreachable, resultCode: 0, message: "PostgreSQL at \(store.description) cannot be reached",
                             path: store.description, clientReason: store.unreachableReason ?? "the shared store cannot be reached")
        }
        do {
            let opened = try store.connect("profiled", deadline: now + PostgresProfileStore.statementNanos)
            connection = opened
            return opened
        } catch {
            lastFailedConnect = monotonicNanos()
            throw store.storeError(error)
        }
    }

    private func query(_ sql: String, _ parameters: [[UInt8]?]) throws(StoreError) -> PostgresResult {
        let connection = try connected()
        do {
            return try connection.query(sql, parameters, deadline: monotonicNanos() + PostgresProfileStore.statementNanos)
        } catch {
            if connection.isBroken { self.connection = nil }
            throw store.storeError(error)
        }
    }

    func lookup(_ userIds: [UnsafeRawBufferPointer], _ found: (Int, ProfileRow) -> Void) throws(StoreError) {
        let result = try query("SELECT user_id, name, portrait_uri FROM profiles WHERE user_id = ANY($1::text[])",
                               [PostgresArray.textLiteral(userIds)])
        // The same id may be asked for more than once in a batch.
        var indices: [[UInt8]: [Int]] = [:]
        for (index, id) in userIds.enumerated() { indices[Array(id), default: []].append(index) }
        for row in 0..<result.rowCount {
            withRow(result, row) { profile in
                for index in indices[Array(profile.userId)] ?? [] { found(index, profile) }
            }
        }
    }

    func count() throws(StoreError) -> Int {
        try query("SELECT count(*) FROM profiles", []).int(0, 0) ?? 0
    }

    func recent(limit: Int, _ each: (ProfileRow) -> Void) throws(StoreError) {
        guard limit > 0 else { return }
        let result = try query("SELECT user_id, name, portrait_uri FROM profiles ORDER BY seq DESC LIMIT $1",
                               [Array(String(limit).utf8)])
        for row in 0..<result.rowCount { withRow(result, row, each) }
    }

    func scan(after: UnsafeRawBufferPointer, limit: Int, _ each: (ProfileRow) -> Void) throws(StoreError) {
        guard limit > 0 else { return }
        let result = try query("SELECT user_id, name, portrait_uri FROM profiles WHERE user_id > $1 ORDER BY user_id LIMIT $2",
                               [Array(after), Array(String(limit).utf8)])
        for row in 0..<result.rowCount { withRow(result, row, each) }
    }
}

/// Row `row` of a `user_id, name, portrait_uri` result, as views valid during `body`.
func withRow<R>(_ result: PostgresResult, _ row: Int, _ body: (ProfileRow) -> R) -> R {
    let empty = UnsafeRawBufferPointer(start: nil, count: 0)
    return result.withValue(row, 0) { userId in
        result.withValue(row, 1) { name in
            result.withValue(row, 2) { portraitUri in
                body(ProfileRow(userId: userId ?? empty, name: name ?? empty, portraitUri: portraitUri ?? empty))
            }
        }
    }
}
