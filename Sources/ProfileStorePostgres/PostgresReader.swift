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
            throw StoreError(kind: .unreachable, message: "PostgreSQL at \(store.description) cannot be reached",
                             path: store.description, clientReason: PostgresProfileStore.unreachable)
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
        // A join of the ids probes the primary key once each (`= ANY` of a large array measured
        // several times slower); an id asked for twice comes back twice, at each position.
        let result = try query("""
            SELECT user_id, name, portrait_uri, position FROM unnest($1::text[]) WITH ORDINALITY AS wanted (id, position)
            JOIN profiles ON user_id = id
            """, [PostgresArray.textLiteral(userIds)])
        for row in 0..<result.rowCount {
            guard let position = result.int(row, 3) else { continue }
            withRow(result, row) { profile in found(position - 1, profile) }
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
