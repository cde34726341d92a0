import ProfileStore

/// The `recent` table (see `Schema`): write sequences in order with the id each wrote, for
/// RECENT. A row counts only while its profile still has that sequence; rows that later writes
/// or removals made stale stay until the table is built again from `profiles`.
enum RecencyTable {
    /// Appends `rows` (seq, user_id) pairs, bound in that order from ?1 on. `replacing`, so that
    /// a merge run again after a crash writes the same rows harmlessly; without, for sequences
    /// newer than any the table holds (the offline writer's, in its transaction).
    static func appendSQL(rows: Int, replacing: Bool = true) -> String {
        let values = (0..<rows).map { "(?\(2 * $0 + 1), ?\(2 * $0 + 2))" }.joined(separator: ", ")
        return "INSERT \(replacing ? "OR REPLACE " : "")INTO recent (seq, user_id) VALUES \(values)"
    }

    /// Builds the table again from the profiles as they are: one sorted pass, which drops every
    /// stale row.
    static let rebuildSQL = """
        DELETE FROM recent;
        INSERT INTO recent (seq, user_id) SELECT seq, user_id FROM profiles ORDER BY seq;
        """

    /// The newest sequence handed out so far: the newest in `recent`, or the newest the write
    /// log merged (a FLUSHALL leaves `recent` empty).
    static let newestSequenceSQL = """
        SELECT max(ifnull((SELECT max(seq) FROM recent), 0), (SELECT merged_seq FROM log_state))
        """

    /// Stale rows allowed beyond this share of the live ones before the table is built again.
    /// A rebuild costs about what sorting the live rows costs (1.5 s of CPU for a million here)
    /// and is shared by the rows appended since the last one: at four times the live rows,
    /// each merged write pays a third of a row's rebuild instead of a whole one (at twice), for
    /// about 30 bytes of disk per stale row (about 90 MB at most over a million profiles).
    ///
    /// While writes wait for merges (`writesWait`: the write buffer past half its limit, or a
    /// stop), the rebuild waits too, up to eight times the live rows (about 210 MB over a
    /// million profiles): done then, it would take the merger's time from the merges the
    /// writers are held back for.
    static func needsRebuild(rows: Int, liveRows: Int, writesWait: Bool) -> Bool {
        rows > (writesWait ? 8 : 4) * liveRows + 10_000
    }
}
