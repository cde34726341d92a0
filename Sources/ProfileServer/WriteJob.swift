import ProfileProtocol
import ProfileStore
import RESPProtocol

/// The arguments of a request, copied into one allocation: `count` ends (UInt32, where each
/// argument stops, counted from the first argument byte), then the arguments back to back.
///
/// Owned by one job or one queued transaction; views into it stay valid as long as it lives.
struct ArgumentStore: ~Copyable {
    private let storage: UnsafeMutableRawBufferPointer
    let count: Int

    init(count: Int, argument: (Int) -> UnsafeRawBufferPointer) {
        self.count = count
        let header = count * MemoryLayout<UInt32>.size
        var total = 0
        for i in 0..<count { total += argument(i).count }
        storage = .allocate(byteCount: max(header + total, 1), alignment: MemoryLayout<UInt32>.alignment)
        var end = 0
        for i in 0..<count {
            let bytes = argument(i)
            if let source = bytes.baseAddress, bytes.count > 0 {
                (storage.baseAddress! + header + end).copyMemory(from: source, byteCount: bytes.count)
            }
            end += bytes.count
            storage.storeBytes(of: UInt32(end), toByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self)
        }
    }

    deinit { storage.deallocate() }

    /// Argument `i` as raw bytes.
    func argument(_ i: Int) -> UnsafeRawBufferPointer {
        let header = count * MemoryLayout<UInt32>.size
        let start = i == 0 ? 0 : Int(storage.load(fromByteOffset: (i - 1) * MemoryLayout<UInt32>.size, as: UInt32.self))
        let end = Int(storage.load(fromByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self))
        return UnsafeRawBufferPointer(rebasing: storage[header + start..<header + end])
    }
}

/// One write request (or RESP transaction) on its way to the writer thread and back: a unit of
/// the store's write path, all of whose operations commit together.
///
/// Created by a worker, executed by the writer, answered by the same worker: each side
/// touches it only while the other cannot (the queue hand-offs order the accesses).
final class WriteJob: WriteUnit, @unchecked Sendable {
    /// What was asked, in the words of the front that asked it: how the operations are read
    /// from the arguments, and how the answer is written.
    enum Request {
        case line(LineWrite)
        case resp(RESPWrite)
    }

    /// A line-protocol write: its operations come straight from its arguments.
    enum LineWrite {
        case set
        case mset(triples: Int)
        case update(hasName: Bool, hasPortraitUri: Bool)
        case del
        case flushAll
    }

    /// How a line-protocol write went.
    enum LineOutcome {
        case pending
        case stored
        case storedCount(Int)
        case updated
        case deleted
        case notFound
        case flushed
    }

    let connection: Connection
    /// The worker that took the request, which gets the answer: the writer reads nothing of
    /// the connection, whose `worker` changes when it moves (it never moves with writes in flight).
    unowned let worker: Worker
    let request: Request
    private let arguments: ArgumentStore
    /// The verb whose latency the answer ends.
    let verb: Verb
    var lineOutcome = LineOutcome.pending
    /// Set when the commit failed: the reason for the client, naming no file.
    var failure: String?
    /// When the worker took the request, for its latency.
    let startNanos: Int

    init(connection: Connection, request: Request, verb: Verb, arguments count: Int,
         argument: (Int) -> UnsafeRawBufferPointer) {
        self.connection = connection
        worker = connection.worker
        self.request = request
        self.verb = verb
        startNanos = worker.passStart
        arguments = ArgumentStore(count: count, argument: argument)
    }

    /// Argument `i` as raw bytes, valid while the job lives.
    func argument(_ i: Int) -> UnsafeRawBufferPointer { arguments.argument(i) }

    // MARK: WriteUnit

    var operationCount: Int {
        switch request {
        case .line(.mset(let triples)): triples
        case .line: 1
        case .resp(let write): write.operations.count
        }
    }

    /// Views into the job's own arguments: valid through the commit.
    func operation(at index: Int) -> WriteOperation {
        switch request {
        case .line(.set), .line(.mset):
            return .put(userId: argument(3 * index), name: argument(3 * index + 1), portraitUri: argument(3 * index + 2))
        case .line(.update(let hasName, let hasPortraitUri)):
            let name: FieldEdit = hasName ? .set(argument(1)) : .keep
            let portraitUri: FieldEdit = hasPortraitUri ? .set(argument(hasName ? 2 : 1)) : .keep
            return .patch(userId: argument(0), name: name, portraitUri: portraitUri,
                          createsMissing: false, removesEmptied: false)
        case .line(.del):
            return .remove(userId: argument(0))
        case .line(.flushAll):
            return .removeAll
        case .resp(let write):
            return write.operation(at: index, argument)
        }
    }

    /// Takes in what the commit did, on the writer's thread, while the outcomes are valid.
    func record(_ outcomes: WriteOutcomes) {
        switch request {
        case .line(.set): lineOutcome = .stored
        case .line(.mset(let triples)): lineOutcome = .storedCount(triples)
        case .line(.update): lineOutcome = outcomes.before(0).exists ? .updated : .notFound
        case .line(.del): lineOutcome = outcomes.before(0).exists ? .deleted : .notFound
        case .line(.flushAll): lineOutcome = .flushed
        case .resp(let write): write.record(outcomes)
        }
    }
}

/// One operation of a job, its values named by argument index.
///
/// A plain value; travels with its job.
struct JobOperation {
    enum Field {
        case keep
        case set(Int)
        case setIfEmpty(Int)
        /// Set to empty (HDEL).
        case clear
    }

    enum Kind {
        case put
        case patch(createsMissing: Bool, removesEmptied: Bool)
        case remove
        case read
        case removeAll
    }

    var kind: Kind
    /// The id's argument; ignored for `.removeAll`.
    var userId: Int
    /// For `.put`, `.set` of each field; for `.patch`, the edits.
    var name = Field.keep
    var portraitUri = Field.keep

    /// The store's operation, with views from `argument`. `userId` arguments of the RESP front
    /// hold the whole key; `keyPrefix` bytes of it are skipped.
    func writeOperation(_ argument: (Int) -> UnsafeRawBufferPointer, keyPrefix: Int) -> WriteOperation {
        if case .removeAll = kind { return .removeAll }
        let id = UnsafeRawBufferPointer(rebasing: argument(userId)[keyPrefix...])
        func edit(_ field: Field) -> FieldEdit {
            switch field {
            case .keep: .keep
            case .set(let i): .set(argument(i))
            case .setIfEmpty(let i): .setIfEmpty(argument(i))
            case .clear: .set(UnsafeRawBufferPointer(start: nil, count: 0))
            }
        }
        func value(_ field: Field) -> UnsafeRawBufferPointer {
            if case .set(let i) = field { return argument(i) }
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
        switch kind {
        case .put: return .put(userId: id, name: value(name), portraitUri: value(portraitUri))
        case .patch(let createsMissing, let removesEmptied):
            return .patch(userId: id, name: edit(name), portraitUri: edit(portraitUri),
                          createsMissing: createsMissing, removesEmptied: removesEmptied)
        case .remove: return .remove(userId: id)
        case .read: return .read(userId: id)
        case .removeAll: return .removeAll
        }
    }
}
