import CSQLite
import Glibc
import ProfileStore
import ProfileSystem

/// The write log: where the server's writes become durable before anything else, as plain
/// files beside the database, `<path>-log.<n>` (segments numbered from 1).
///
/// Why not the database: an upsert of a random id into a large table dirties a random page
/// of it, and each commit writes every page it dirtied;
/// an append writes only its own bytes. The writes wait in memory (`WriteBuffer`) until the
/// merger moves them into the table in id order, where many share each page.
///
/// A segment: a 32-byte header (magic `PRFLOG01`, segment number, how long the previous
/// segment's valid data was when this one began, all little-endian, and the header's
/// CRC-32C), then frames. A frame is one group commit: payload length (UInt32), the
/// payload's CRC-32C (UInt32), then the payload: the first operation's write sequence
/// (Int64), the operation count (UInt32), and the operations, each a kind (UInt8), id length
/// (UInt8), name length (UInt16), portraitUri length (UInt16) and the three values; the
/// operations take consecutive sequences.
///
/// Reading stops at the first frame that is short or fails its checksum: a write the process
/// was killed in the middle of, which nobody was told had committed. A segment's successor
/// records how much of it was valid, so after a system crash that lost the end of one segment
/// but kept the next, reading stops there too: what survives is always a prefix of what was
/// committed.
enum WriteLogFile {
    /// "PRFLOG01", little-endian.
    static let magic: UInt64 = 0x3130_474F_4C46_5250
    static let headerBytes = 32
    static let frameHeaderBytes = 8
    static let payloadHeaderBytes = 12
    static let operationHeaderBytes = 6
    /// A segment past this size is closed and the next one begun, so merged segments can go.
    static let segmentBytes = 64 << 20

    enum OperationKind: UInt8 {
        case put = 1
        case removal = 2
        case removeAll = 3
    }

    static func segmentPath(of path: String, number: UInt64) -> String { "\(path)-log.\(number)" }

    /// The numbers of the segments beside the database at `path`, in order.
    static func segmentNumbers(of path: String) -> [UInt64] {
        let (directory, base) = splitPath(path)
        let prefix = Array((base + "-log.").utf8)
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        var numbers: [UInt64] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 })
            }
            guard name.count > prefix.count, name.starts(with: prefix) else { continue }
            let digits = name[prefix.count...]
            guard digits.count <= 19, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let number = UInt64(String(decoding: digits, as: UTF8.self)), number > 0 else { continue }
            numbers.append(number)
        }
        return numbers.sorted()
    }

    /// The directory holding `path` and the file's own name.
    static func splitPath(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return (".", path) }
        return (directoryPath(of: path), String(Substring(path.utf8[path.utf8.index(after: slash)...])))
    }

    static func header(number: UInt64, previousLength: Int) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: headerBytes)
        header.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: number.littleEndian, toByteOffset: 8, as: UInt64.self)
            raw.storeBytes(of: UInt64(previousLength).littleEndian, toByteOffset: 16, as: UInt64.self)
            let crc = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<24]))
            raw.storeBytes(of: crc.littleEndian, toByteOffset: 24, as: UInt32.self)
        }
        return header
    }
}

/// One frame being built: a group commit's operations, appended in commit order.
///
/// Threading: the write path's thread.
final class LogFrame {
    private(set) var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private(set) var count = 0
    private(set) var operationCount = 0
    private(set) var firstSequence: Int64 = 0

    init() {
        capacity = 64 << 10
        storage = .allocate(byteCount: capacity, alignment: 8)
    }

    deinit { storage.deallocate() }

    /// Starts an empty frame whose first operation will take `sequence`.
    func begin(firstSequence sequence: Int64) {
        firstSequence = sequence
        operationCount = 0
        count = WriteLogFile.frameHeaderBytes + WriteLogFile.payloadHeaderBytes
    }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage, count: count) }

    /// The sequence the next operation takes.
    var nextSequence: Int64 { firstSequence + Int64(operationCount) }

    /// Appends an operation; returns where its three values start in `storage`.
    @discardableResult
    func append(_ kind: WriteLogFile.OperationKind, userId: UnsafeRawBufferPointer,
                name: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
                portraitUri: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0))
        -> (userId: Range<Int>, name: Range<Int>, portraitUri: Range<Int>) {
        // The values may be views of this frame (a patch of an id written earlier in the same
        // commit): the old storage is freed only once they are copied.
        let retired = reserve(WriteLogFile.operationHeaderBytes + userId.count + name.count + portraitUri.count)
        defer { retired?.deallocate() }
        let at = storage + count
        at.storeBytes(of: kind.rawValue, as: UInt8.self)
        at.storeBytes(of: UInt8(userId.count), toByteOffset: 1, as: UInt8.self)
        at.storeBytes(of: UInt16(name.count).littleEndian, toByteOffset: 2, as: UInt16.self)
        at.storeBytes(of: UInt16(portraitUri.count).littleEndian, toByteOffset: 4, as: UInt16.self)
        count += WriteLogFile.operationHeaderBytes
        let id = copy(userId), first = copy(name), second = copy(portraitUri)
        operationCount += 1
        return (id, first, second)
    }

    private func copy(_ value: UnsafeRawBufferPointer) -> Range<Int> {
        let start = count
        if value.count > 0 { (storage + count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
        count += value.count
        return start..<count
    }

    /// Makes room for `more` bytes; returns the storage it replaced, for the caller to free.
    private func reserve(_ more: Int) -> UnsafeMutableRawPointer? {
        guard count + more > capacity else { return nil }
        let larger = max(capacity * 2, count + more)
        let grown = UnsafeMutableRawPointer.allocate(byteCount: larger, alignment: 8)
        grown.copyMemory(from: storage, byteCount: count)
        let old = storage
        storage = grown
        capacity = larger
        return old
    }

    func view(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage + range.lowerBound, count: range.count)
    }

    /// Calls `body` with each operation appended since `begin`, in order.
    func forEachOperation(_ body: (WriteLogFile.OperationKind, UnsafeRawBufferPointer, UnsafeRawBufferPointer,
                                   UnsafeRawBufferPointer) -> Void) {
        var offset = WriteLogFile.frameHeaderBytes + WriteLogFile.payloadHeaderBytes
        for _ in 0..<operationCount {
            let at = storage + offset
            let kind = WriteLogFile.OperationKind(rawValue: at.load(as: UInt8.self))!
            let idCount = Int(at.load(fromByteOffset: 1, as: UInt8.self))
            let nameCount = Int(UInt16(littleEndian: at.loadUnaligned(fromByteOffset: 2, as: UInt16.self)))
            let uriCount = Int(UInt16(littleEndian: at.loadUnaligned(fromByteOffset: 4, as: UInt16.self)))
            offset += WriteLogFile.operationHeaderBytes
            body(kind, view(offset..<offset + idCount), view(offset + idCount..<offset + idCount + nameCount),
                 view(offset + idCount + nameCount..<offset + idCount + nameCount + uriCount))
            offset += idCount + nameCount + uriCount
        }
    }

    /// Writes the frame's header and checksum; the frame is then ready to append.
    func seal() {
        let payload = count - WriteLogFile.frameHeaderBytes
        storage.storeBytes(of: UInt32(payload).littleEndian, as: UInt32.self)
        let payloadStart = storage + WriteLogFile.frameHeaderBytes
        payloadStart.storeBytes(of: firstSequence.littleEndian, as: Int64.self)
        payloadStart.storeBytes(of: UInt32(operationCount).littleEndian, toByteOffset: 8, as: UInt32.self)
        let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: payloadStart, count: payload))
        storage.storeBytes(of: crc.littleEndian, toByteOffset: 4, as: UInt32.self)
    }
}

/// Appends frames to the current segment, begins the next one past `segmentBytes`, and
/// removes segments whose writes are all in the table.
///
/// Threading: `append` and `close` on the write path's thread; `removeSegments` from the
/// merger's, under a lock of its own.
final class WriteLogWriter: @unchecked Sendable {
    private let file: StoreFile
    private var descriptor: Int32 = -1
    private var number: UInt64
    /// Where the valid data of the current segment ends.
    private var end = 0
    /// The valid length of the segment before the current one, for the next header.
    private var previousLength = 0
    private var lastSequence: Int64 = 0
    private let sealedLock = ConditionLock()
    /// Closed segments, oldest first, with the newest sequence each holds.
    private var sealed: [(number: UInt64, lastSequence: Int64)] = []
    /// Syncs the log once a second under `--sync normal`; nil under `full`, where every
    /// append syncs.
    let syncer: LogSyncer?

    /// - Parameter firstNumber: the number of the first segment it writes.
    init(file: StoreFile, firstNumber: UInt64) {
        self.file = file
        number = firstNumber
        if file.synchronous == .normal {
            let syncer = LogSyncer(file: file)
            syncer.start()
            self.syncer = syncer
        } else {
            syncer = nil
        }
    }

    deinit {
        syncer?.stop()
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    /// Appends a sealed frame whose newest operation has `lastSequence`. On failure nothing of
    /// it remains in the log (the segment is cut back, or abandoned for a new one when even
    /// that fails), and the error says why.
    func append(_ frame: UnsafeRawBufferPointer, lastSequence: Int64) throws(StoreError) {
        if let code = file.fault {
            throw StoreError(resultCode: code, message: "\(String(cString: sqlite3_errstr(code))) (injected)",
                             sql: nil, path: file.path)
        }
        if let error = syncer?.failure { throw syncFailure(error) }
        if descriptor >= 0 && end > WriteLogFile.headerBytes && end + frame.count > WriteLogFile.segmentBytes {
            try closeCurrent()
        }
        if descriptor < 0 { try openNext() }
        var written = 0
        while written < frame.count {
            let n = pwrite(descriptor, frame.baseAddress! + written, frame.count - written, off_t(end + written))
            if n < 0 {
                if errno == EINTR { continue }
                throw abandonFrame(errno: errno, "cannot append to the write log")
            }
            written += n
        }
        if file.synchronous == .full && fdatasync(descriptor) != 0 {
            throw abandonFrame(errno: errno, "cannot sync the write log")
        }
        end += frame.count
        self.lastSequence = lastSequence
        syncer?.noteAppend()
    }

    /// The error every append fails with once a sync of the log failed.
    func syncFailure(_ error: Int32) -> StoreError {
        let why = "a sync of the write log to disk failed (\(String(cString: strerror(error)))); "
            + "writes are refused until a restart"
        return StoreError(kind: .io, resultCode: SQLITE_IOERR, message: why, path: file.path, clientReason: why)
    }

    /// Takes back a frame that failed: cuts the segment back to its valid end, or, when even
    /// that fails, leaves the segment (the next one records where its valid data ends).
    private func abandonFrame(errno error: Int32, _ what: String) -> StoreError {
        if ftruncate(descriptor, off_t(end)) != 0 {
            try? closeCurrent()
        }
        return logError(what, error)
    }

    private func logError(_ what: String, _ error: Int32) -> StoreError {
        StoreError(kind: error == ENOSPC || error == EDQUOT ? .full : .io,
                   resultCode: error == ENOSPC || error == EDQUOT ? SQLITE_FULL : SQLITE_IOERR,
                   message: "\(what): \(String(cString: strerror(error)))", path: file.path)
    }

    private func openNext() throws(StoreError) {
        let path = WriteLogFile.segmentPath(of: file.path, number: number)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw logError("cannot create the write log segment \(path)", errno) }
        let header = WriteLogFile.header(number: number, previousLength: previousLength)
        let written = header.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, 0) }
        let synced = written == header.count
            && (file.synchronous == .full ? fdatasync(fd) == 0 && syncDirectory() : true)
        let syncCopy = synced && syncer != nil ? dup(fd) : -1
        if !synced || (syncer != nil && syncCopy < 0) {
            let error = written < 0 ? errno : (written != header.count ? ENOSPC : errno)
            Glibc.close(fd)
            unlink(path)
            throw logError("cannot begin the write log segment \(path)", error)
        }
        syncer?.follow(syncCopy)
        descriptor = fd
        end = WriteLogFile.headerBytes
    }

    /// Makes a new segment's name durable, for `--sync full`.
    private func syncDirectory() -> Bool {
        ProfileStoreSQLite.syncDirectory(holding: file.path) == 0
    }

    /// Closes the current segment; the next append begins the next one.
    private func closeCurrent() throws(StoreError) {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
        sealedLock.lock()
        sealed.append((number, lastSequence))
        sealedLock.unlock()
        previousLength = end
        number += 1
    }

    /// Removes the closed segments whose every write is in the table. Any thread.
    func removeSegments(mergedThrough sequence: Int64) {
        sealedLock.lock()
        var removable: [UInt64] = []
        while let first = sealed.first, first.lastSequence <= sequence {
            removable.append(first.number)
            sealed.removeFirst()
        }
        sealedLock.unlock()
        for number in removable { unlink(WriteLogFile.segmentPath(of: file.path, number: number)) }
    }

    /// Closes the log once everything in it is in the table, and removes every segment.
    func closeAndRemoveAll() {
        syncer?.stop()
        if descriptor >= 0 {
            Glibc.close(descriptor)
            descriptor = -1
            unlink(WriteLogFile.segmentPath(of: file.path, number: number))
        }
        sealedLock.lock()
        let numbers = sealed.map(\.number)
        sealed.removeAll()
        sealedLock.unlock()
        for number in numbers { unlink(WriteLogFile.segmentPath(of: file.path, number: number)) }
    }
}

/// One operation read back from the log at open.
///
/// Views valid during the call that received it.
struct LogRecord {
    var sequence: Int64
    var kind: WriteLogFile.OperationKind
    var userId: UnsafeRawBufferPointer
    var name: UnsafeRawBufferPointer
    var portraitUri: UnsafeRawBufferPointer
}

/// Reads the segments back at open.
enum WriteLogReader {
    /// Calls `each` with every operation after `mergedThrough`, oldest first, and returns the
    /// newest sequence seen and the segments read (all of them, for removal once merged).
    ///
    /// - Throws: `.notADatabase` for a segment that is not a write log of this format.
    static func replay(_ file: StoreFile, mergedThrough: Int64,
                       _ each: (LogRecord) throws(StoreError) -> Void) throws(StoreError)
        -> (lastSequence: Int64, segments: [UInt64]) {
        let numbers = WriteLogFile.segmentNumbers(of: file.path)
        var contents: [[UInt8]] = []
        var previousLengths: [Int] = []
        for number in numbers {
            let path = WriteLogFile.segmentPath(of: file.path, number: number)
            let bytes = try readWhole(path, file)
            guard bytes.count >= WriteLogFile.headerBytes, let previous = validHeader(bytes, number: number) else {
                throw StoreError(kind: .notADatabase, resultCode: SQLITE_NOTADB,
                                 message: "\(path) is not a write log of this store", path: file.path)
            }
            contents.append(bytes)
            previousLengths.append(previous)
        }
        var lastSequence = mergedThrough
        for i in contents.indices {
            // The next segment says how much of this one was valid when it began.
            var limit = contents[i].count
            if i + 1 < contents.count && numbers[i + 1] == numbers[i] + 1 { limit = min(limit, previousLengths[i + 1]) }
            // withUnsafeBytes cannot throw a typed error: the first one is carried out.
            var failure: StoreError?
            let validEnd = contents[i].withUnsafeBytes { raw -> Int in
                do throws(StoreError) {
                    return try readFrames(UnsafeRawBufferPointer(rebasing: raw[0..<limit]), mergedThrough: mergedThrough) {
                        (record) throws(StoreError) in
                        lastSequence = max(lastSequence, record.sequence)
                        try each(record)
                    }
                } catch {
                    failure = error
                    return 0
                }
            }
            if let failure { throw failure }
            if i + 1 < contents.count && numbers[i + 1] == numbers[i] + 1 && validEnd < previousLengths[i + 1] {
                // A system crash lost the end of this segment and kept later ones: stop here, so
                // what survives is a prefix of what was committed.
                break
            }
        }
        return (lastSequence, numbers)
    }

    /// The previous segment's valid length from a header, or nil when it is not one.
    private static func validHeader(_ bytes: [UInt8], number: UInt64) -> Int? {
        bytes.withUnsafeBytes { raw -> Int? in
            guard UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)) == WriteLogFile.magic,
                  UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) == number,
                  UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 24, as: UInt32.self))
                    == CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<24])) else { return nil }
            return Int(UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
        }
    }

    /// Reads frames from the start of a segment until its end or the first frame that is not
    /// whole; returns where the valid frames end.
    private static func readFrames(_ segment: UnsafeRawBufferPointer, mergedThrough: Int64,
                                   _ each: (LogRecord) throws(StoreError) -> Void) throws(StoreError) -> Int {
        var offset = WriteLogFile.headerBytes
        while segment.count - offset >= WriteLogFile.frameHeaderBytes {
            let length = Int(UInt32(littleEndian: segment.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            let crc = UInt32(littleEndian: segment.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
            let start = offset + WriteLogFile.frameHeaderBytes
            guard length >= WriteLogFile.payloadHeaderBytes, length <= segment.count - start else { break }
            let payload = UnsafeRawBufferPointer(rebasing: segment[start..<start + length])
            guard CRC32C.checksum(payload) == crc, let records = parse(payload) else { break }
            for record in records where record.sequence > mergedThrough { try each(record) }
            offset = start + length
        }
        return offset
    }

    /// A payload's operations, or nil when they do not fill it exactly.
    private static func parse(_ payload: UnsafeRawBufferPointer) -> [LogRecord]? {
        let first = Int64(littleEndian: payload.loadUnaligned(fromByteOffset: 0, as: Int64.self))
        let count = Int(UInt32(littleEndian: payload.loadUnaligned(fromByteOffset: 8, as: UInt32.self)))
        var records: [LogRecord] = []
        var offset = WriteLogFile.payloadHeaderBytes
        for i in 0..<count {
            guard payload.count - offset >= WriteLogFile.operationHeaderBytes,
                  let kind = WriteLogFile.OperationKind(rawValue: payload[offset]) else { return nil }
            let idCount = Int(payload[offset + 1])
            let nameCount = Int(UInt16(littleEndian: payload.loadUnaligned(fromByteOffset: offset + 2, as: UInt16.self)))
            let uriCount = Int(UInt16(littleEndian: payload.loadUnaligned(fromByteOffset: offset + 4, as: UInt16.self)))
            offset += WriteLogFile.operationHeaderBytes
            guard payload.count - offset >= idCount + nameCount + uriCount else { return nil }
            let id = UnsafeRawBufferPointer(rebasing: payload[offset..<offset + idCount])
            let name = UnsafeRawBufferPointer(rebasing: payload[offset + idCount..<offset + idCount + nameCount])
            let uri = UnsafeRawBufferPointer(rebasing:
                payload[offset + idCount + nameCount..<offset + idCount + nameCount + uriCount])
            records.append(LogRecord(sequence: first + Int64(i), kind: kind, userId: id, name: name, portraitUri: uri))
            offset += idCount + nameCount + uriCount
        }
        return offset == payload.count ? records : nil
    }

    private static func readWhole(_ path: String, _ file: StoreFile) throws(StoreError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw StoreError(kind: .io, resultCode: SQLITE_CANTOPEN,
                             message: "cannot open the write log segment \(path): \(String(cString: strerror(errno)))",
                             path: file.path)
        }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else {
                throw StoreError(kind: .io, resultCode: SQLITE_IOERR,
                                 message: "cannot read the write log segment \(path): \(String(cString: strerror(errno)))",
                                 path: file.path)
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return bytes
    }
}
