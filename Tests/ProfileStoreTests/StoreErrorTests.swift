import CSQLite
import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// What the operator reads of a store failure: one phrase, whatever statement failed.
@Suite struct StoreErrorTests {
    @Test func aBatchStatementIsNamedByItsHeadOnly() {
        let rows = (0..<128).map { "(?\($0 * 4 + 1), ?\($0 * 4 + 2), ?\($0 * 4 + 3), ?\($0 * 4 + 4))" }
        let sql = "INSERT INTO profiles (user_id, name, portrait_uri, seq) VALUES " + rows.joined(separator: ", ")
        let error = StoreError(resultCode: SQLITE_FULL, message: "database or disk is full", sql: sql, path: "/var/p.sqlite3")
        #expect(error.description
                == "the disk or database at /var/p.sqlite3 is full: database or disk is full (SQLite code 13) while running INSERT INTO profiles")
    }

    @Test(arguments: [("SELECT merged_seq FROM log_state", "SELECT merged_seq FROM log_state"),
                      ("DELETE FROM profiles WHERE user_id = ?1 AND seq < ?2", "DELETE FROM profiles"),
                      ("UPDATE log_state SET merged_seq = ?1", "UPDATE log_state"),
                      ("PRAGMA wal_checkpoint(TRUNCATE);", "PRAGMA wal_checkpoint(TRUNCATE)"),
                      ("BEGIN IMMEDIATE;", "BEGIN IMMEDIATE")])
    func theHeadIsTheFirstWordsBeforeAnyList(sql: String, head: String) {
        #expect(StoreError.head(ofStatement: sql) == head)
    }
}
