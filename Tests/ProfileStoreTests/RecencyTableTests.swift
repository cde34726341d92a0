import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// When the merger builds `recent` again: past four times the live rows, and past eight
/// while writes wait for merges, so that the rebuild does not take the merger from them.
@Suite struct RecencyTableTests {
    @Test func aRebuildWaitsLongerWhileWritesWaitForMerges() {
        let live = 1_000_000
        #expect(!RecencyTable.needsRebuild(rows: 4 * live, liveRows: live, writesWait: false))
        #expect(RecencyTable.needsRebuild(rows: 4 * live + 10_001, liveRows: live, writesWait: false))
        #expect(!RecencyTable.needsRebuild(rows: 8 * live, liveRows: live, writesWait: true))
        #expect(RecencyTable.needsRebuild(rows: 8 * live + 10_001, liveRows: live, writesWait: true))
        // A small table is not rebuilt for a few stale rows.
        #expect(!RecencyTable.needsRebuild(rows: 10_000, liveRows: 0, writesWait: false))
    }
}
