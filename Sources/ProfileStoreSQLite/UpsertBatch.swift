import CSQLite
import Glibc
import ProfileStore

/// The rows of one large upsert, gathered in input order for `ProfileWriter.upsert(_:)`,
/// which writes them in id order.
///
/// SQLite inserts rows sorted by id into a large table several times faster than rows in
/// random order, because each page of the table is then changed once. Sorting a whole import
/// in memory would make memory grow with the input, so the batch keeps at most one run of
/// rows in memory (`runRows` rows or `runBytes` of values): a full run is sorted by id, loses
/// all but the last row of a repeated id, and goes to an unnamed temporary file beside the
/// store; the writer merges the runs. Each row remembers its position in the batch, which
/// becomes its write sequence, so input order still decides which row is newer. The ids also
/// go to the file in input order, in chunks, for the recency table (`forEachInInputOrder`, or
/// the writer's thread that writes it while the batch fills: `spilled`).
///
/// Threading: one thread at a time (the thread of the writer it is handed to).
public final class UpsertBatch {
    /// Enough rows that sorted writes pay off, few enough to keep memory to tens of MB.
    static let runRows = 200_000
    /// Rows with long values fill a run sooner.
    static let runBytes = 32 << 20

    /// Where the temporary file goes: the store's directory, which has room for the store.
    private let directory: String
    /// The database, named in errors.
    private let path: String

    /// The values of the rows in memory, back to back.
    private var bytes: [UInt8] = []
    /// Per row in memory: where its values start in `bytes` and how long each is.
    private var rows: [MemoryRow] = []
    /// Rows handed over so far, in memory and in runs.
    private(set) var count = 0
    /// The batch position of the first row in memory.
    private var firstInMemory = 0
    /// The first row in memory whose id is not in the file yet (`spillIds`).
    private var idsInFile = 0
    /// Ids go to the file in chunks of this many rows, each told to `spilled`: small enough
    /// that a writer taking them keeps pace with the rows being appended.
    static let idChunkRows = 16_384

    /// The temporary file holding the runs, or -1 before the first run is written.
    private var descriptor: Int32 = -1
    /// Each run in the file: its byte range.
    private(set) var runs: [Range<Int>] = []
    /// The ids in input order in the file, chunk by chunk, and whether `spilled` took each.
    private var inputOrderChunks: [(ids: SpilledIds, taken: Bool)] = []
    private var fileEnd = 0

    private struct MemoryRow {
        /// The first eight bytes of the id, big-endian: most comparisons need nothing else.
        var prefix: UInt64
        var start: Int
        var idCount: UInt32
        var nameCount: UInt32
        var uriCount: UInt32
    }

    /// Rows per run; tests make it small to merge many runs.
    private let runRows: Int

    /// Told of each chunk of ids once it is in the file; returns whether it writes their
    /// recency itself (on another thread, while this batch goes on filling), so that
    /// `forEachInInputOrder` skips them.
    var spilled: ((SpilledIds) -> Bool)?

    /// One chunk of ids in input order in the temporary file (a UInt32 length, then the id, per
    /// row), readable from any thread while the batch lives and is not emptied.
    struct SpilledIds: Sendable {
        let descriptor: Int32
        let range: Range<Int>
        /// The batch position of the chunk's first row.
        let firstPosition: Int
        let path: String

        /// Calls `each` with every id and its position, in input order.
        func forEach(_ each: (Int, UnsafeRawBufferPointer) throws(StoreError) -> Void) throws(StoreError) {
            // One chunk's ids at a time: a few hundred KB.
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, range.count), alignment: 4)
            defer { buffer.deallocate() }
            try readFully(descriptor, buffer.baseAddress!, at: range.lowerBound, count: range.count, path: path)
            var offset = 0, position = firstPosition
            while offset < range.count {
                let length = Int(buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
                try each(position, UnsafeRawBufferPointer(start: buffer.baseAddress! + offset + 4, count: length))
                offset += 4 + length
                position += 1
            }
        }
    }

    init(directory: String, path: String, runRows: Int = UpsertBatch.runRows) {
        self.directory = directory
        self.path = path
        self.runRows = runRows
    }

    /// A batch for the store at `path`, its runs in the store's directory.
    convenience init(beside path: String) {
        self.init(directory: directoryPath(of: path), path: path)
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    /// Copies one row in; it is newer than every row appended before it.
    ///
    /// - Throws: when a full run cannot be written to the temporary file.
    public func append(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                       portraitUri: UnsafeRawBufferPointer) throws(StoreError) {
        if rows.count == runRows || (bytes.count >= Self.runBytes && !rows.isEmpty) {
            try spill()
        } else if rows.count - idsInFile == Self.idChunkRows {
            try spillIds()
        }
        var prefix: UInt64 = 0
        for i in 0..<8 { prefix = prefix << 8 | UInt64(i < userId.count ? userId[i] : 0) }
        rows.append(MemoryRow(prefix: prefix, start: bytes.count, idCount: UInt32(userId.count),
                              nameCount: UInt32(name.count), uriCount: UInt32(portraitUri.count)))
        // As typed buffers: appending raw buffers copied byte by byte, 7% of an import.
        bytes.append(contentsOf: userId.assumingMemoryBound(to: UInt8.self))
        bytes.append(contentsOf: name.assumingMemoryBound(to: UInt8.self))
        bytes.append(contentsOf: portraitUri.assumingMemoryBound(to: UInt8.self))
        count += 1
    }

    /// Forgets every row and truncates the temporary file, keeping it for the next batch.
    public func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        rows.removeAll(keepingCapacity: true)
        runs.removeAll()
        inputOrderChunks.removeAll()
        count = 0
        firstInMemory = 0
        idsInFile = 0
        fileEnd = 0
        if descriptor >= 0 { _ = ftruncate(descriptor, 0) }
    }

    // MARK: Runs

    /// A run's records: a 20-byte header (position Int64, then the three lengths as UInt32, in
    /// this machine's byte order, as only this process reads them), then the three values.
    static let headerBytes = 20

    /// Calls `write` with the rows in memory as run records, sorted by id, the last of a
    /// repeated id only, a few at a time; returns the bytes written.
    private func writeSortedRun(_ write: (UnsafeRawBufferPointer) throws(StoreError) -> Void) throws(StoreError) -> Int {
        var order = Array(0..<Int32(rows.count))
        bytes.withUnsafeBytes { raw in
            rows.withUnsafeBufferPointer { rows in
                order.sort { a, b in
                    let left = rows[Int(a)], right = rows[Int(b)]
                    if left.prefix != right.prefix { return left.prefix < right.prefix }
                    let order = compareIds(UnsafeRawBufferPointer(start: raw.baseAddress! + left.start, count: Int(left.idCount)),
                                           UnsafeRawBufferPointer(start: raw.baseAddress! + right.start, count: Int(right.idCount)))
                    // Equal ids keep input order, so the last of them is the newest.
                    return order != 0 ? order < 0 : a < b
                }
            }
        }
        // Records gather in a small buffer between writes, so a run never exists twice in memory.
        let flushBytes = 1 << 20
        var pending: [UInt8] = []
        pending.reserveCapacity(flushBytes + Self.headerBytes + 4096)
        var total = 0
        // The closures of withUnsafeBytes cannot throw a typed error, so the write's is carried out.
        var failure: StoreError?
        func flush() {
            pending.withUnsafeBytes { chunk in
                do throws(StoreError) { try write(chunk) } catch { failure = error }
            }
            total += pending.count
            pending.removeAll(keepingCapacity: true)
        }
        bytes.withUnsafeBytes { raw in
            for (i, index) in order.enumerated() where failure == nil {
                let row = rows[Int(index)]
                if i + 1 < order.count {
                    let next = rows[Int(order[i + 1])]
                    if next.prefix == row.prefix
                        && compareIds(UnsafeRawBufferPointer(start: raw.baseAddress! + next.start, count: Int(next.idCount)),
                                      UnsafeRawBufferPointer(start: raw.baseAddress! + row.start, count: Int(row.idCount))) == 0 {
                        continue
                    }
                }
                var header = (Int64(firstInMemory + Int(index)), row.idCount, row.nameCount, row.uriCount)
                withUnsafeBytes(of: &header) { pending.append(contentsOf: $0.prefix(Self.headerBytes)) }
                let valueBytes = Int(row.idCount) + Int(row.nameCount) + Int(row.uriCount)
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[row.start..<row.start + valueBytes]))
                if pending.count >= flushBytes { flush() }
            }
        }
        if failure == nil && !pending.isEmpty { flush() }
        if let failure { throw failure }
        return total
    }
    /// Writes the ids of the rows in memory not in the file yet to it, in input order, as one
    /// chunk, and tells `spilled`.
    private func spillIds() throws(StoreError) {
        guard idsInFile < rows.count else { return }
        try openFile()
        let orderStart = fileEnd
        var ids: [UInt8] = []
        ids.reserveCapacity((rows.count - idsInFile) * 16)
        bytes.withUnsafeBytes { raw in
            for row in rows[idsInFile...] {
                withUnsafeBytes(of: row.idCount) { ids.append(contentsOf: $0) }
                ids.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[row.start..<row.start + Int(row.idCount)]))
            }
        }
        // The closures of withUnsafeBytes cannot throw a typed error, so the write's is carried out.
        var failure: StoreError?
        ids.withUnsafeBytes { chunk in
            do throws(StoreError) { try appendToFile(chunk) } catch { failure = error }
        }
        if let failure { throw failure }
        let chunk = SpilledIds(descriptor: descriptor, range: orderStart..<fileEnd, firstPosition: firstInMemory + idsInFile,
                               path: path)
        idsInFile = rows.count
        inputOrderChunks.append((chunk, spilled?(chunk) ?? false))
    }

    /// Writes the rows in memory to the temporary file as one sorted run, after the ids not
    /// there yet in input order.
    private func spill() throws(StoreError) {
        try spillIds()
        let start = fileEnd
        let written = try writeSortedRun { (chunk) throws(StoreError) in try appendToFile(chunk) }
        runs.append(start..<start + written)
        firstInMemory += rows.count
        idsInFile = 0
        bytes.removeAll(keepingCapacity: true)
        rows.removeAll(keepingCapacity: true)
    }

    /// Writes `chunk` at the end of the temporary file.
    private func appendToFile(_ chunk: UnsafeRawBufferPointer) throws(StoreError) {
        var done = 0
        while done < chunk.count {
            let n = pwrite(descriptor, chunk.baseAddress! + done, chunk.count - done, off_t(fileEnd + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw fileError("cannot write the import's sort file", errno)
            }
            done += n
        }
        fileEnd += chunk.count
    }

    /// The rows in memory as one sorted run in a buffer of its own, for the merge.
    private func memoryRun() throws(StoreError) -> UnsafeMutableRawBufferPointer {
        let run = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count + rows.count * Self.headerBytes),
                                                         alignment: 8)
        var used = 0
        _ = try writeSortedRun { (chunk) throws(StoreError) in
            (run.baseAddress! + used).copyMemory(from: chunk.baseAddress!, byteCount: chunk.count)
            used += chunk.count
        }
        return UnsafeMutableRawBufferPointer(rebasing: run[0..<used])
    }

    /// Opens a temporary file without a name (O_TMPFILE), so that no file is left behind
    /// however the process ends; where the file system cannot, a named one unlinked at once.
    private func openFile() throws(StoreError) {
        guard descriptor < 0 else { return }
        // O_TMPFILE is a macro Swift does not import: __O_TMPFILE | O_DIRECTORY on Linux.
        let temporaryFile: Int32 = 0o20_000_000 | O_DIRECTORY
        var fd = open(directory, temporaryFile | O_RDWR | O_CLOEXEC, 0o600)
        if fd < 0 {
            var template = Array("\(directory)/.profiles-import.XXXXXX".utf8CString)
            fd = mkstemp(&template)
            if fd < 0 { throw fileError("cannot create the import's sort file in \(directory)", errno) }
            unlink(template)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        descriptor = fd
    }

    fileprivate func fileError(_ what: String, _ error: Int32) -> StoreError {
        sortFileError(what, error, path: path)
    }

    // MARK: Merging

    /// Calls `each` with every row, in id order, the last row of a repeated id only, and its
    /// position in the batch (0 for the first row appended). The views live until `each` returns.
    func forEachSorted(_ each: (ProfileRow, Int) throws(StoreError) -> Void) throws(StoreError) {
        var cursors: [RunCursor] = []
        for run in runs {
            cursors.append(RunCursor(range: run, bufferBytes: 256 << 10))
        }
        if !rows.isEmpty { cursors.append(RunCursor(memory: try memoryRun())) }
        for cursor in cursors { try cursor.load(self) }
        var heap = cursors.filter { !$0.isAtEnd }
        // A binary min-heap of the runs by their current row (id, then position).
        func less(_ a: RunCursor, _ b: RunCursor) -> Bool {
            let order = compareIds(a.userId, b.userId)
            return order != 0 ? order < 0 : a.position < b.position
        }
        MergeHeap.build(&heap, by: less)
        while let top = heap.first {
            try each(top.row, top.position)
            try top.next(self)
            if top.isAtEnd {
                heap[0] = heap[heap.count - 1]
                heap.removeLast()
            }
            MergeHeap.siftDown(&heap, by: less)
        }
    }

    /// Calls `each` with every row's id in input order, and its position in the batch, repeated
    /// ids included, but for the chunks `spilled` took. The views live until `each` returns.
    func forEachInInputOrder(_ each: (Int, UnsafeRawBufferPointer) throws(StoreError) -> Void) throws(StoreError) {
        for (ids, taken) in inputOrderChunks where !taken {
            try ids.forEach(each)
        }
        var position = firstInMemory + idsInFile
        var failure: StoreError?
        bytes.withUnsafeBytes { raw in
            for row in rows[idsInFile...] where failure == nil {
                do throws(StoreError) {
                    try each(position, UnsafeRawBufferPointer(start: raw.baseAddress! + row.start, count: Int(row.idCount)))
                } catch {
                    failure = error
                }
                position += 1
            }
        }
        if let failure { throw failure }
    }

    /// Reads `range` of the temporary file into `buffer`, all of it.
    fileprivate func read(_ buffer: UnsafeMutableRawPointer, at offset: Int, count: Int) throws(StoreError) {
        try readFully(descriptor, buffer, at: offset, count: count, path: path)
    }
}

/// Reads `count` bytes at `offset` of the import's sort file into `buffer`, all of them.
private func readFully(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, at offset: Int, count: Int,
                       path: String) throws(StoreError) {
    var done = 0
    while done < count {
        let n = pread(descriptor, buffer + done, count - done, off_t(offset + done))
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { throw sortFileError("cannot read the import's sort file", n < 0 ? errno : EIO, path: path) }
        done += n
    }
}

private func sortFileError(_ what: String, _ error: Int32, path: String) -> StoreError {
    StoreError(kind: error == ENOSPC ? .full : .io, resultCode: error == ENOSPC ? SQLITE_FULL : SQLITE_IOERR,
               message: "\(what): \(String(cString: strerror(error)))", path: path)
}

/// Reads one sorted run record by record, through a buffer refilled from the file.
///
/// Threading: the merging thread.
private final class RunCursor {
    private var buffer: UnsafeMutableRawBufferPointer
    /// The run's bytes not yet in the buffer.
    private var fileNext: Int
    private let fileEnd: Int
    /// The buffer's unread bytes: the current record starts at `start`.
    private var start = 0
    private var end = 0
    private(set) var isAtEnd = false
    private(set) var position = 0
    private(set) var row = ProfileRow(userId: UnsafeRawBufferPointer(start: nil, count: 0),
                                      name: UnsafeRawBufferPointer(start: nil, count: 0),
                                      portraitUri: UnsafeRawBufferPointer(start: nil, count: 0))
    var userId: UnsafeRawBufferPointer { row.userId }
    private var recordBytes = 0

    init(range: Range<Int>, bufferBytes: Int) {
        buffer = .allocate(byteCount: bufferBytes, alignment: 8)
        fileNext = range.lowerBound
        fileEnd = range.upperBound
    }

    /// A run already in memory, read without a file; the cursor takes the buffer over.
    init(memory run: UnsafeMutableRawBufferPointer) {
        buffer = run
        end = run.count
        fileNext = 0
        fileEnd = 0
    }

    deinit {
        buffer.deallocate()
    }

    /// Reads the first record.
    func load(_ batch: UpsertBatch) throws(StoreError) {
        try readRecord(batch)
    }

    /// Moves past the current record.
    func next(_ batch: UpsertBatch) throws(StoreError) {
        start += recordBytes
        try readRecord(batch)
    }

    private func readRecord(_ batch: UpsertBatch) throws(StoreError) {
        guard try ensure(UpsertBatch.headerBytes, batch) else {
            isAtEnd = true
            return
        }
        var header: (Int64, UInt32, UInt32, UInt32) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &header) {
            $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[start..<start + UpsertBatch.headerBytes]))
        }
        let (position, idCount, nameCount, uriCount) = (Int(header.0), Int(header.1), Int(header.2), Int(header.3))
        recordBytes = UpsertBatch.headerBytes + idCount + nameCount + uriCount
        guard try ensure(recordBytes, batch) else {
            throw batch.fileError("the import's sort file ends inside a row", EIO)
        }
        self.position = position
        let values = buffer.baseAddress! + start + UpsertBatch.headerBytes
        row = ProfileRow(userId: UnsafeRawBufferPointer(start: values, count: idCount),
                         name: UnsafeRawBufferPointer(start: values + idCount, count: nameCount),
                         portraitUri: UnsafeRawBufferPointer(start: values + idCount + nameCount, count: uriCount))
    }

    /// Makes `bytes` bytes from `start` on readable, refilling (and if need be growing) the
    /// buffer from the file; false when the run has no bytes left at all.
    private func ensure(_ bytes: Int, _ batch: UpsertBatch) throws(StoreError) -> Bool {
        if end - start >= bytes { return true }
        if end == start && fileNext == fileEnd { return false }
        let kept = end - start
        if bytes > buffer.count {
            let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes, alignment: 8)
            memcpy(larger.baseAddress!, buffer.baseAddress! + start, kept)
            buffer.deallocate()
            buffer = larger
        } else if kept > 0 {
            // The rest of a record moves to the front; the two ranges may overlap.
            memmove(buffer.baseAddress!, buffer.baseAddress! + start, kept)
        }
        start = 0
        end = kept
        let wanted = min(buffer.count - end, fileEnd - fileNext)
        if wanted > 0 {
            try batch.read(buffer.baseAddress! + end, at: fileNext, count: wanted)
            fileNext += wanted
            end += wanted
        }
        return end - start >= bytes
    }
}
