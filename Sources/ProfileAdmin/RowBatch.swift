/// Good rows copied out of a parser until a batch is full: the unit that is
/// sent as MSET lines or committed as one transaction, and that `--strict`
/// drops whole when a bad row turns up.
///
/// Threading: one thread at a time.
final class RowBatch {
    private struct Entry {
        var start: Int
        var userId: Int32
        var name: Int32
        var portraitUri: Int32
    }

    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var used = 0
    private var entries: [Entry] = []

    init(expectedRows: Int) {
        capacity = max(1 << 16, expectedRows * 64)
        storage = .allocate(byteCount: capacity, alignment: 16)
        entries.reserveCapacity(expectedRows)
    }

    deinit { storage.deallocate() }

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    func append(_ row: RowValues) {
        let size = row.userId.count + row.name.count + row.portraitUri.count
        if used + size > capacity {
            let larger = UnsafeMutableRawPointer.allocate(byteCount: max(capacity * 2, used + size), alignment: 16)
            larger.copyMemory(from: storage, byteCount: used)
            storage.deallocate()
            storage = larger
            capacity = max(capacity * 2, used + size)
        }
        let start = used
        for value in [row.userId, row.name, row.portraitUri] where !value.isEmpty {
            (storage + used).copyMemory(from: value.baseAddress!, byteCount: value.count)
            used += value.count
        }
        entries.append(Entry(start: start, userId: Int32(row.userId.count), name: Int32(row.name.count),
                             portraitUri: Int32(row.portraitUri.count)))
    }

    func removeAll() {
        used = 0
        entries.removeAll(keepingCapacity: true)
    }

    /// Calls `body` with each row in order; the views last for the call.
    func forEach(_ body: (RowValues) throws -> Void) rethrows {
        for entry in entries {
            let id = UnsafeRawBufferPointer(start: storage + entry.start, count: Int(entry.userId))
            let name = UnsafeRawBufferPointer(start: storage + entry.start + Int(entry.userId), count: Int(entry.name))
            let uri = UnsafeRawBufferPointer(start: storage + entry.start + Int(entry.userId) + Int(entry.name),
                                             count: Int(entry.portraitUri))
            try body(RowValues(userId: id, name: name, portraitUri: uri))
        }
    }
}
