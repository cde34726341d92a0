import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// The write buffer's index against a model: every id finds its newest entry through appends,
/// drops of merged memtables (whose slots go stale and are passed over), rebuilds of the
/// index without them, and FLUSHALL.
@Suite struct WriteBufferTests {
    @Test func everyIdFindsItsNewestEntryThroughDropsAndRebuilds() {
        let buffer = WriteBuffer(limitBytes: 64 << 20)
        var model: [String: (sequence: Int64, removed: Bool)] = [:]
        var random = SystemRandomNumberGenerator()
        var sequence: Int64 = 0
        func write(_ id: String, removed: Bool) {
            sequence += 1
            buffer.prepareIndex(forAdding: 1)
            buffer.lock.lock()
            Array(id.utf8).withUnsafeBytes { key in
                _ = buffer.apply(removed ? .removal : .put, sequence: sequence, userId: key,
                                 name: UnsafeRawBufferPointer(start: nil, count: 0),
                                 portraitUri: UnsafeRawBufferPointer(start: nil, count: 0), now: 0)
            }
            buffer.lock.unlock()
            model[id] = (sequence, removed)
        }
        func check(_ round: Int) {
            buffer.lock.lock()
            defer { buffer.lock.unlock() }
            for (id, expected) in model {
                let found = Array(id.utf8).withUnsafeBytes { buffer.newest($0) }
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
            buffer.lock.lock()
            let merged = Array(buffer.freezeAll().dropLast())
            buffer.drop(merged)
            let kept = buffer.memtables
            buffer.lock.unlock()
            let firstKept = kept.first?.firstSequence ?? .max
            let keptIds = Set(kept.flatMap { memtable in
                memtable.offsets.map { String(decoding: memtable.entry(at: $0).userId, as: UTF8.self) }
            })
            model = model.filter { keptIds.contains($0.key) && $0.value.sequence >= firstKept }
            buffer.lock.lock()
            for id in ["id1", "id2"] where !keptIds.contains(id) {
                #expect(Array(id.utf8).withUnsafeBytes { buffer.newest($0) } == nil, "\(id) outlived its memtable")
            }
            buffer.lock.unlock()
            check(round)
        }
        buffer.lock.lock()
        buffer.clear(at: sequence + 1)
        #expect(Array("id1".utf8).withUnsafeBytes { buffer.newest($0) } == nil)
        #expect(buffer.entries == 0)
        buffer.lock.unlock()
    }

    /// A burst grows the index; once every memtable is merged it shrinks back, but never below
    /// what the write path has made room for and not yet appended.
    @Test func theIndexShrinksWhenEveryMemtableIsMergedButKeepsRoomMadeForWrites() {
        let buffer = WriteBuffer(limitBytes: 64 << 20)
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        var sequence: Int64 = 0
        func write(_ ids: Range<Int>) {
            buffer.prepareIndex(forAdding: ids.count)
            buffer.lock.lock()
            for id in ids {
                sequence += 1
                Array("id\(id)".utf8).withUnsafeBytes { key in
                    _ = buffer.apply(.put, sequence: sequence, userId: key, name: empty, portraitUri: empty, now: 0)
                }
            }
            buffer.lock.unlock()
        }
        func dropEverything() {
            buffer.lock.lock()
            buffer.drop(buffer.freezeAll())
            buffer.lock.unlock()
        }
        let idle = buffer.bytes
        write(0..<100_000)
        #expect(buffer.bytes > idle + 1 << 20)
        dropEverything()
        #expect(buffer.bytes == idle)

        // Room made for 50,000 ids, then everything merged before they are appended.
        write(0..<100_000)
        buffer.prepareIndex(forAdding: 50_000)
        dropEverything()
        #expect(buffer.bytes > idle)
        buffer.lock.lock()
        for id in 200_000..<250_000 {
            sequence += 1
            Array("id\(id)".utf8).withUnsafeBytes { key in
                _ = buffer.apply(.put, sequence: sequence, userId: key, name: empty, portraitUri: empty, now: 0)
            }
        }
        let found = (200_000..<250_000).filter { id in Array("id\(id)".utf8).withUnsafeBytes { buffer.newest($0) } != nil }
        buffer.lock.unlock()
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
            buffer.prepareIndex(forAdding: 1)
            buffer.lock.lock()
            Array(id.utf8).withUnsafeBytes { key in
                Array("name \(sequence)".utf8).withUnsafeBytes { name in
                    portraitUri.withUnsafeBytes { uri in
                        _ = buffer.apply(.put, sequence: sequence, userId: key, name: name, portraitUri: uri, now: 0)
                    }
                }
            }
            buffer.lock.unlock()
            newest[id] = sequence
        }
        func check(_ when: String) {
            buffer.lock.lock()
            defer { buffer.lock.unlock() }
            for (id, sequence) in newest {
                let found = Array(id.utf8).withUnsafeBytes { buffer.newest($0) }
                #expect(found?.sequence == sequence, "\(when): \(id) found \(String(describing: found?.sequence))")
                #expect(found.map { String(decoding: $0.name, as: UTF8.self) } == "name \(sequence)", "\(when): \(id)")
                #expect(found.map { Array($0.portraitUri) == portraitUri } == true, "\(when): \(id)")
            }
        }
        buffer.lock.lock()
        let memtables = buffer.memtables
        buffer.lock.unlock()
        #expect(memtables.count > 16)
        #expect(memtables.allSatisfy { $0.chunkCount <= Memtable.maxChunks && $0.entryCount < Memtable.maxEntries })
        check("before the drop")
        buffer.lock.lock()
        buffer.drop(Array(buffer.freezeAll().prefix(memtables.count / 2)))
        let kept = buffer.memtables
        buffer.lock.unlock()
        let firstKept = kept.first!.firstSequence
        newest = newest.filter { $0.value >= firstKept }
        #expect(!newest.isEmpty)
        check("after the drop")
    }
}
