import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// The order a merge walks ids in: byte order, the newest entry of each, whatever prefix the
/// ids share (the sort compares eight bytes after it as an integer) and whether one id is the
/// start of another.
@Suite struct MergeOrderTests {
    @Test func idsSharingLongPrefixesComeInByteOrderNewestFirst() {
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        var sequence: Int64 = 0
        func memtable(_ serial: UInt32, _ ids: [String]) -> Memtable {
            let memtable = Memtable(serial: serial, chunkShift: 16)
            for id in ids {
                sequence += 1
                let name = Array("v\(sequence)".utf8)
                Array(id.utf8).withUnsafeBytes { key in
                    name.withUnsafeBytes { _ = memtable.append(sequence: sequence, kind: .put, userId: key, name: $0,
                                                               portraitUri: empty, now: 0) }
                }
            }
            memtable.isFrozen = true
            memtable.publish(sortedLatest: memtable.makeSortedLatest())
            return memtable
        }
        // The first shares "user:000000" throughout, with ids that end where others go on;
        // the second shares less with the first than with itself.
        let first = ["user:000000123456", "user:000000", "user:0000001234567", "user:000000123455",
                     "user:000000123456", "user:0000009", "user:00000012345"]
        let second = ["user:000000123456", "user:1", "user:0000001234560", "user:000000"]
        let memtables = [memtable(1, first), memtable(2, second)]

        var newest: [String: Int64] = [:]
        for (offset, id) in (first + second).enumerated() { newest[id] = Int64(offset + 1) }
        let expected = newest.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }

        // Each memtable's own sorted view, which SCAN searches.
        for memtable in memtables {
            let ids = memtable.sortedLatest!.map { Array(memtable.entry(at: $0).userId) }
            #expect(ids == ids.sorted { $0.lexicographicallyPrecedes($1) })
        }

        var cursor = MergeCursor(memtables)
        var walked: [(String, Int64)] = []
        while let entry = cursor.next() { walked.append((String(decoding: entry.userId, as: UTF8.self), entry.sequence)) }
        #expect(walked.map(\.0) == expected)
        for (id, sequence) in walked { #expect(sequence == newest[id], "\(id)") }
    }
}
