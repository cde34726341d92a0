import ProfileServer

/// The ids an MGET has left to answer once its reply reached the connection's high-water
/// mark: the rest of the reply is made as the client reads (`LineWorkerFront.continueLookups`), so a
/// connection never holds more than the mark plus one profile's reply.
///
/// The ids are copied out of the request line, which is then done with; the copy counts in
/// the connection's memory. Threading: the worker thread that owns the connection.
final class UnfinishedLookups: UnfinishedReply {
    private var bytes: [UInt8] = []
    /// Where each id ends in `bytes`.
    private var ends: [Int] = []
    /// The next id to answer.
    private(set) var next = 0

    init(_ count: Int, id: (Int) -> UnsafeRawBufferPointer) {
        ends.reserveCapacity(count)
        for index in 0..<count {
            bytes.append(contentsOf: id(index))
            ends.append(bytes.count)
        }
    }

    var isDone: Bool { next == ends.count }

    /// The next id's bytes, valid until `advance` or until this value is dropped.
    func withNext<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let start = next == 0 ? 0 : ends[next - 1]
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start..<ends[next]])) }
    }

    func advance() { next += 1 }

    /// Calls `body` with how many ids are left and each of them by index, views valid during
    /// the call.
    func withRemaining<R>(_ body: (Int, (Int) -> UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { all in
            try body(ends.count - next) { index in
                let i = next + index
                let start = i == 0 ? 0 : ends[i - 1]
                return UnsafeRawBufferPointer(rebasing: all[start..<ends[i]])
            }
        }
    }

    /// What it holds, for the clients' memory.
    var byteCount: Int { bytes.capacity + ends.capacity * MemoryLayout<Int>.stride }
}

extension Connection {
    /// The line protocol's unfinished reply: an MGET's ids left to answer.
    var unfinishedLookups: UnfinishedLookups? {
        get { unfinishedReply as? UnfinishedLookups }
        set { unfinishedReply = newValue }
    }
}
