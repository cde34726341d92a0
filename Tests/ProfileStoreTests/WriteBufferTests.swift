import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// The write buffer's index against a model: every id finds its newest entry through appends,
/// drops of merged memtables (whose slots go stale and are passed over), rebuilds of the
/// index without them, and FLUSHALL.
@Suite struct WriteBufferTests {
    /// Appends one committed operation, as the write path does.
    private func append(_ buffer: WriteBuffer, _ kind: WriteLogFile.OperationKind, _ id: String, sequence: Int64,
                        name: [UInt8] = [], portraitUri: [UInt8] = []) {
        Array(id.utf8).withUnsafeBytes { key in
            name.withUnsafeBytes { name in
                portraitUri.withUnsafeBytes { portraitUri in
                    _ = buffer.appendCommitted(count: 1, firstSequence: sequence, now: 0) { apply in
                        apply(kind, key, name, portraitUri)
                    }
                }
            }
        }
    }

    /// The newest entry's sequence, whether it is a removal, and its values, if the buffer has one.
    private func newest(_ buffer: WriteBuffer, _ id: String) -> (sequence: Int64, isRemoval: Bool, name: [UInt8], portraitUri: [UInt8])? {
        let lookup = Array(id.utf8).withUnsafeBytes { key in
            buffer.lookUp(key) { ($0.sequence, $0.isRemoval, Array($0.name), Array($0.portraitUri)) }
        }
        guard case .found(let found) = lookup else { return nil }
        return found
    }

    @Test func everyIdFindsItsNewestEntryThroughDropsAndRebuilds() {
        let buffer = WriteBuffer(limitBytes: 64 << 20)
        var model: [String: (sequence: Int64, removed: Bool)] = [:]
        var random = SystemRandomNumberGenerator()
        var sequence: Int64 = 0
        func write(_ id: String, removed: Bool) {
            sequence += 1
            append(buffer, removed ? .removal : .put, id, sequence: sequence)
            model[id] = (sequence, removed)
        }
        func check(_ round: Int) {
            for (id, expected) in model {
                let found = newest(buffer, id)
                #expect(found?.sequence == expected.sequence && found?.isRemoval == expected.removed,
                        "round \(round): \(id) found \(String(describing: found?.sequence)), wanted \(expected)")
            }
        }
        for round in 0..<6 {
            for _ in 0..<40_000 {
                write("id\(Int.random(in: 0..<30_000, using: &random))", removed: Int.random(in: 0..<10, using: &random) == 0)
            }
            check(round)
            // A merge of everything but the newest memtable: its ids leave the buffer.
            buffer.dropMerged(Array(buffer.freezeAll().dropLast()))
            let kept = buffer.withContents { $0.memtables }
            let firstKept = kept.first?.firstSequence ?? .max
            let keptIds = Set(kept.flatMap { memtable in
                memtable.offsets.map { String(decoding: memtable.entry(at: $0).userId, as: UTF8.self) }
            })
            model = model.filter { keptIds.contains($0.key) && $0.value.sequence >= firstKept }
            for id in ["id1", "id2"] where !keptIds.contains(id) {
                #expect(newest(buffer, id) == nil, "\(id) outlived its memtable")
            }
            check(round)
        }
        append(buffer, .removeAll, "", sequence: sequence + 1)
        #expect(newest(buffer, "id1") == nil)
        #expect(buffer.occupancy.entries == 0)
        #expect(buffer.pendingClear == sequence + 1)
    }

    /// A burst grows the index; once every memtable is merged it shrinks back, but never below
    /// what the write path has made room for and not yet appended.
    @Test func theIndexShrinksWhenEveryMemtableIsMergedButKeepsRoomMadeForWrites() {
        let buffer = WriteBuffer(limitBytes: 64 << 20)
        var sequence: Int64 = 0
        func write(_ ids: Range<Int>) {
            let keys = ids.map { Array("id\($0)".utf8) }
            let first = sequence + 1
            sequence += Int64(ids.count)
            _ = buffer.appendCommitted(count: ids.count, firstSequence: first, now: 0) { apply in
                for key in keys { key.withUnsafeBytes { apply(.put, $0, UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(start: nil, count: 0)) } }
            }
        }
        func dropEverything() {
            buffer.dropMerged(buffer.freezeAll())
        }
        let idle = buffer.occupancy.bytes
        write(0..<100_000)
        #expect(buffer.occupancy.bytes > idle + 1 << 20)
        dropEverything()
        #expect(buffer.occupancy.bytes == idle)

        // Room made for 50,000 ids, then everything merged before they are appended.
        write(0..<100_000)
        buffer.prepareIndex(forAdding: 50_000)
        dropEverything()
        #expect(buffer.occupancy.bytes > idle)
        write(200_000..<250_000)
        let found = (200_000..<250_000).filter { newest(buffer, "id\($0)") != nil }
        #expect(found.count == 50_000)
    }

    /// Large entries in a small buffer: memtables fill by their chunks, not their entry count,
    /// more of them are live than the buffer's first table of them holds, and every entry
    /// still resolves to its own bytes, before and after the oldest half is dropped.
    @Test func largeEntriesFillMemtablesByChunks() {
        let buffer = WriteBuffer(limitBytes: 1 << 20)
        let portraitUri = [UInt8](repeating: UInt8(ascii: "u"), count: 2000)
        var newest: [String: Int64] = [:]
        for sequence in Int64(1)...12_000 {
            let id = "id\(sequence % 500)"
            append(buffer, .put, id, sequence: sequence, name: Array("name \(sequence)".utf8), portraitUri: portraitUri)
            newest[id] = sequence
        }
        func check(_ when: String) {
            for (id, sequence) in newest {
                let found = self.newest(buffer, id)
                #expect(found?.sequence == sequence, "\(when): \(id) found \(String(describing: found?.sequence))")
                #expect(found.map { String(decoding: $0.name, as: UTF8.self) } == "name \(sequence)", "\(when): \(id)")
                #expect(found.map { $0.portraitUri == portraitUri } == true, "\(when): \(id)")
            }
        }
        let memtables = buffer.withContents { $0.memtables }
        #expect(memtables.count > 16)
        #expect(memtables.allSatisfy { $0.chunkCount <= Memtable.maxChunks && $0.entryCount < Memtable.maxEntries })
        check("before the drop")
        buffer.dropMerged(Array(buffer.freezeAll().prefix(memtables.count / 2)))
        let kept = buffer.withContents { $0.memtables }
        let firstKept = kept.first!.firstSequence
        newest = newest.filter { $0.value >= firstKept }
        #expect(!newest.isEmpty)
        check("after the drop")
    }
}
