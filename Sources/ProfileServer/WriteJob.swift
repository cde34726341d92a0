import ProfileModel
import ProfileStore

/// The arguments of a request, copied into one allocation: `count` ends (UInt32, where each
/// argument stops, counted from the first argument byte), then the arguments back to back.
///
/// Owned by one job or one queued transaction; views into it stay valid as long as it lives.
package struct ArgumentStore: ~Copyable {
    private let storage: UnsafeMutableRawBufferPointer
    package let count: Int

    package init(count: Int, argument: (Int) -> UnsafeRawBufferPointer) {
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

    /// The bytes it holds.
    package var byteCount: Int { storage.count }

    /// Argument `i` as raw bytes.
    package func argument(_ i: Int) -> UnsafeRawBufferPointer {
        let header = count * MemoryLayout<UInt32>.size
        let start = i == 0 ? 0 : Int(storage.load(fromByteOffset: (i - 1) * MemoryLayout<UInt32>.size, as: UInt32.self))
        let end = Int(storage.load(fromByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self))
        return UnsafeRawBufferPointer(rebasing: storage[header + start..<header + end])
    }
}

/// How a front words the answer to a write it sent to the writer: each front keeps, with the
/// job, what it needs to know of the request, and reads what the commit did from the job.
///
/// Made by a worker with its job, used by that worker when the job is answered.
package protocol WriteAnswer {
    /// Writes the job's answer (its reply, or the store's failure) through the front that took
    /// the request, on the worker that took it: all of it, or, when it has parts, what comes
    /// before them.
    func write(_ job: WriteJob, through front: any WorkerFront)
    /// How many parts follow what `write` wrote (an EXEC's replies, one per command), which
    /// the core writes as `ReadAnswer.partCount` says; 0 when `write` wrote the whole reply.
    func partCount(of job: WriteJob) -> Int
    func writePart(_ index: Int, of job: WriteJob, through front: any WorkerFront)
}

/// One write request (or RESP transaction) on its way to the writer thread and back: a unit of
/// the store's write path, all of whose operations commit together. The operations are the
/// store's, the same for every front; only `answer` knows which front asked.
///
/// Created by a worker, executed by the writer, answered by the same worker: each side
/// touches it only while the other cannot (the queue hand-offs order the accesses).
public final class WriteJob: WriteUnit, @unchecked Sendable {
    /// What the commit did to one operation.
    package struct Result {
        package var before: ProfileState
        package var after: ProfileState
        /// For a read: where its values were copied in `readValues`.
        package var name: Range<Int> = 0..<0
        package var portraitUri: Range<Int> = 0..<0
    }

    package let connection: Connection
    /// The worker that took the request, which gets the answer: the writer reads nothing of
    /// the connection, whose `worker` changes when it moves (it never moves with writes in flight).
    package unowned let worker: Worker
    private let arguments: ArgumentStore
    /// The store operations, their values named by argument index.
    private let operations: SmallList<JobOperation>
    /// Bytes before each id in its argument (a RESP key's prefix).
    private let keyPrefix: Int
    /// How the front words the answer.
    package let answer: any WriteAnswer
    /// The kind of request whose latency the answer ends.
    package let kind: RequestKind
    /// Who made the change, for the change feed (`ChangeFeed.changed`): the RESP
    /// connection's `CLIENT ID`, for CLIENT TRACKING's NOLOOP and for its own invalidations to
    /// go before the answer; 0 for a connection no feed tells apart.
    package let changeOrigin: Int
    /// What the commit did, by operation; empty until it committed.
    package private(set) var results = SmallList<Result>()
    /// The values the unit's reads found, copied while the commit's views were valid.
    private var readValues: [UInt8] = []
    /// Set when the commit failed: the reason for the client, naming no file.
    package var failure: String?
    /// The notices the commit's changes made for other connections, which its answer waits
    /// for; nil when none could be made (nobody tracks).
    package var notices: ChangeNotices?
    /// When the worker took the request, for its latency.
    package let startNanos: Int

    package init(connection: Connection, operations: SmallList<JobOperation>, keyPrefix: Int = 0, answer: any WriteAnswer, kind: RequestKind,
                 changeOrigin: Int = 0, arguments count: Int, argument: (Int) -> UnsafeRawBufferPointer) {
        self.connection = connection
        self.changeOrigin = changeOrigin
        worker = connection.worker
        self.operations = operations
        self.keyPrefix = keyPrefix
        self.answer = answer
        self.kind = kind
        startNanos = worker.processor.passStart
        arguments = ArgumentStore(count: count, argument: argument)
    }

    /// Argument `i` as raw bytes, valid while the job lives.
    package func argument(_ i: Int) -> UnsafeRawBufferPointer { arguments.argument(i) }
    /// What the job holds: its arguments and what its reads found.
    package var heldBytes: Int { arguments.byteCount + readValues.capacity }

    // MARK: WriteUnit

    public var operationCount: Int { operations.count }

    /// Views into the job's own arguments: valid through the commit.
    public func operation(at index: Int) -> WriteOperation {
        operations[index].writeOperation({ arguments.argument($0) }, keyPrefix: keyPrefix)
    }

    /// Operation `index`'s id, without making the store's operation; nil for a removal of
    /// every profile.
    package func userId(at index: Int) -> UnsafeRawBufferPointer? {
        if removesAll(at: index) { return nil }
        return UnsafeRawBufferPointer(rebasing: arguments.argument(operations[index].userId)[keyPrefix...])
    }

    /// Whether operation `index` removes every profile.
    package func removesAll(at index: Int) -> Bool {
        if case .removeAll = operations[index].kind { return true }
        return false
    }

    /// Takes in what the commit did, on the writer's thread, while the outcomes are valid.
    package func record(_ outcomes: WriteOutcomes) {
        for index in 0..<operations.count {
            var result = Result(before: outcomes.before(index), after: .absent)
            if let row = outcomes.after(index) {
                result.after = .present(hasName: row.name.count > 0, hasPortraitUri: row.portraitUri.count > 0)
                if case .read = operations[index].kind {
                    result.name = readValues.count..<readValues.count + row.name.count
                    readValues.append(contentsOf: row.name)
                    result.portraitUri = readValues.count..<readValues.count + row.portraitUri.count
                    readValues.append(contentsOf: row.portraitUri)
                }
            }
            results.append(result)
        }
    }

    /// A read's values, as the commit found them; nil when there was no profile.
    package func values(ofRead index: Int) -> ProfileValues? {
        let result = results[index]
        guard result.before.exists else { return nil }
        return readValues.withUnsafeBytes { bytes in
            ProfileValues(name: UnsafeRawBufferPointer(rebasing: bytes[result.name]),
                          portraitUri: UnsafeRawBufferPointer(rebasing: bytes[result.portraitUri]))
        }
    }
}

/// One operation of a job, its values named by argument index.
///
/// A plain value; travels with its job.
package struct JobOperation {
    package enum Field {
        case keep
        case set(Int)
        case setIfEmpty(Int)
        /// Set to empty (HDEL).
        case clear
    }

    package enum Kind {
        case put
        case patch(createsMissing: Bool, removesEmptied: Bool)
        case remove
        case read
        case removeAll
    }

    package var kind: Kind
    /// The id's argument; ignored for `.removeAll`.
    package var userId: Int
    /// For `.put`, `.set` of each field; for `.patch`, the edits.
    package var name = Field.keep
    package var portraitUri = Field.keep

    package init(kind: Kind, userId: Int, name: Field = .keep, portraitUri: Field = .keep) {
        self.kind = kind
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }

    /// The store's operation, with views from `argument`. `userId` arguments of the RESP front
    /// hold the whole key; `keyPrefix` bytes of it are skipped.
    package func writeOperation(_ argument: (Int) -> UnsafeRawBufferPointer, keyPrefix: Int) -> WriteOperation {
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

/// A list that keeps its first element inline: most jobs have one operation, and then their
/// lists cost no allocation.
///
/// A plain value; used by the threads its owner is handed between.
package struct SmallList<Element> {
    private var first: Element?
    private var rest: [Element] = []

    package init() {}

    package init(_ elements: some Sequence<Element>) {
        for element in elements { append(element) }
    }

    package var count: Int { first == nil ? 0 : 1 + rest.count }

    package subscript(index: Int) -> Element {
        index == 0 ? first! : rest[index - 1]
    }

    package mutating func append(_ element: Element) {
        if first == nil { first = element } else { rest.append(element) }
    }
}
