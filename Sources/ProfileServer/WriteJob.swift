import ProfileProtocol

/// One write request on its way to the writer thread and back.
///
/// Created by a worker, executed by the writer, answered by the same worker: each side
/// touches it only while the other cannot (the queue hand-offs order the accesses).
final class WriteJob: @unchecked Sendable {
    enum Operation {
        case set
        case mset(triples: Int)
        case update(hasName: Bool, hasPortraitUri: Bool)
        case del
        case flushAll
        /// Not a write: COUNT, RECENT, SCAN or STATS waiting until the table has every write
        /// committed before it (they read the table, which lags the write log); the worker
        /// serves the read when it is answered. SCAN's `after` is the job's argument.
        case barrier(TableRead)
    }

    enum TableRead {
        case count
        case recent(limit: Int)
        case scan(limit: Int)
        /// STATS, for its store_rows.
        case stats

        var verb: Verb {
            switch self {
            case .count: .count
            case .recent: .recent
            case .scan: .scan
            case .stats: .stats
            }
        }
    }

    enum Outcome {
        case pending
        case stored
        case storedCount(Int)
        case updated
        case deleted
        case notFound
        case flushed
        case barrierPassed
        case failed(String)
    }

    let connection: Connection
    /// The worker that took the request, which gets the answer: the writer reads nothing of
    /// the connection, whose `worker` changes when it moves (it never moves with writes in flight).
    unowned let worker: Worker
    let operation: Operation
    /// The request's arguments in one allocation: `argumentCount` ends (UInt32, where each
    /// argument stops, counted from the first argument byte), then the arguments back to back.
    private let storage: [UInt8]
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
        // With capacity 0 the initializer stores the count into the one shared empty array,
        // a write ThreadSanitizer reports when two workers queue a COUNT at once.
        guard header + total > 0 else {
            storage = []
            return
        }
        storage = [UInt8](unsafeUninitializedCapacity: header + total) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            var end = 0
            for i in 0..<count {
                let bytes = argument(i)
                if let source = bytes.baseAddress, bytes.count > 0 {
                    (raw.baseAddress! + header + end).copyMemory(from: source, byteCount: bytes.count)
                }
                end += bytes.count
                raw.storeBytes(of: UInt32(end), toByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self)
            }
            initialized = header + total
        }
    }

    /// Runs `body` with every argument as raw bytes.
    func withArguments<R>(_ body: (_ argument: (Int) -> UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { raw in
            let header = argumentCount * MemoryLayout<UInt32>.size
            return try body { i in
                let start = i == 0 ? 0 : Int(raw.load(fromByteOffset: (i - 1) * MemoryLayout<UInt32>.size, as: UInt32.self))
                let end = Int(raw.load(fromByteOffset: i * MemoryLayout<UInt32>.size, as: UInt32.self))
                return UnsafeRawBufferPointer(rebasing: raw[header + start..<header + end])
            }
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
        case .barrier(let read): read.verb
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
