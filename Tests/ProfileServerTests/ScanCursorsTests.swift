@testable import RESPFront
import Testing

/// SCAN's cursors stay exact as IEEE doubles, as clients that keep them as JavaScript numbers
/// (node-redis) need: a larger one comes back rounded and is no longer known.
@Suite struct ScanCursorsTests {
    @Test func noCursorExceedsTheLargestIntegerADoubleHolds() {
        let made = (0..<1_000).map { _ in [UInt8]("42".utf8).withUnsafeBytes { ScanCursors().cursor(after: $0) } }
        let inexact = made.filter { $0 < 1 || $0 > (1 << 53) - 1 || UInt64(exactly: Double($0)) != $0 }
        #expect(inexact.isEmpty, "\(inexact.count) of 1,000 cursors are not exact as doubles, e.g. \(inexact.prefix(3))")
    }

    @Test func theCountWrapsFromTheLargestToOneAndSkipsZero() {
        let cursors = ScanCursors(first: (1 << 53) - 2)
        let made = (0..<4).map { n in [UInt8]("id\(n)".utf8).withUnsafeBytes { cursors.cursor(after: $0) } }
        #expect(made == [(1 << 53) - 2, (1 << 53) - 1, 1, 2])
        for (n, cursor) in made.enumerated() {
            #expect(cursors.userId(after: cursor) == [UInt8]("id\(n)".utf8))
        }
    }
}
