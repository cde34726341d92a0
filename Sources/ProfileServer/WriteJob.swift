import ProfileProtocol
import ProfileStore

/// One write request on its way to the writer thread and back: a unit of the store's write
/// path, all of whose operations commit together.
///
/// Created by a worker, executed by the writer, answered by the same worker: each side
/// touches it only while the other cannot (the queue hand-offs order the accesses).
final class WriteJob: WriteUnit, @unchecked Sendable {
    enum Operation {
        case set
        case mset(triples: Int)
        case update(hasName: Bool, hasPortraitUri: Bool)
        case del
        case flushAll
    }

    enum Outcome {
        case pending
        case stored
        case storedCount(Int)
        case updated
        case deleted
        case notFound
        case flushed
        case failed(String)
    }

    let connection: Connection
    /// The worker that took the request, which gets the answer: the writer reads nothing of
    /// the connection, whose `worker` changes when it moves (it never moves with writes in flight).
    unowned let worker: Worker
    let operation: Operation
    /// The request's arguments in one allocation the job owns: `argumentCount` ends (UInt32,
    /// where each argument stops, counted from the first argument byte), then the arguments
    /// back to back. Views into it stay valid as long as the job lives.
    private let storage: UnsafeMutableRawBufferPointer
    let argumentCount: Int
    var outcome = Outcome.pending
    /// When the worker took the request, for its latency.
    let startNanos: Int

    init(connection: Connection, operation: Operation, arguments count: Int,
         argument: (Int) -> UnsafeRawBufferPointer) {
        self.connection = connection
        worker = connection.worker
        self.operation = operation
        startNanos = worker.passStart
        argumentCount = count
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

    /// Argument `i` as raw bytes, valid while the job lives.
    func argument(_ i: Int) -> UnsafeRawBufferPointer {
        let header = argumentCount * MemoryLayout<UInt32>.size
        let start = i == 0 ? 0 : Int(storage.load(fromByteOffset: (i - 1) * MemoryLayout<UInt32>.size, as: UInt32.self))
        let end = Int(storage.load(fromByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self))
        return UnsafeRawBufferPointer(rebasing: storage[header + start..<header + end])
    }

    // MARK: WriteUnit

    var operationCount: Int {
        if case .mset(let triples) = operation { return triples }
        return 1
    }

    /// Views into the job's own arguments: valid through the commit.
    func operation(at index: Int) -> WriteOperation {
        switch operation {
        case .set, .mset:
            return .put(userId: argument(3 * index), name: argument(3 * index + 1), portraitUri: argument(3 * index + 2))
        case .update(let hasName, let hasPortraitUri):
            let name: FieldEdit = hasName ? .set(argument(1)) : .keep
            let portraitUri: FieldEdit = hasPortraitUri ? .set(argument(hasName ? 2 : 1)) : .keep
            return .patch(userId: argument(0), name: name, portraitUri: portraitUri,
                          createsMissing: false, removesEmptied: false)
        case .del:
            return .remove(userId: argument(0))
        case .flushAll:
            return .removeAll
        }
    }

    /// The verb whose latency this job's answer ends.
    var verb: Verb {
        switch operation {
        case .set: .set
        case .mset: .mset
        case .update: .update
        case .del: .del
        case .flushAll: .flushall
        }
    }

    /// Profiles this job wrote, for `cmd_set`.
    var profilesWritten: Int {
        switch (operation, outcome) {
        case (.set, .stored): 1
        case (.mset(let n), .storedCount): n
        case (.update, .updated): 1
        default: 0
        }
    }
}
