// Answers of many parts, made as the client reads: a job's answer (an EXEC's replies, RECENT's
// rows, a fetched MGET's lines) pauses where the connection's replies must
// (`RequestProcessor.repliesMustPause`), and the answers of the connection's later jobs wait
// behind it, so that replies keep request order and no connection holds more than its
// high-water mark and one part.

/// A job's answer whose parts are written as far as replies may, the rest as the client reads.
/// It holds the job (what it read, which the parts are made from), counted in the connection's
/// memory.
///
/// Owned by its connection; the worker thread that holds the connection.
final class UnfinishedAnswer: UnfinishedReply {
    private let count: Int
    private var next: Int
    /// Writes part `index` through the front of the worker that holds the connection then.
    private let part: (Int, any WorkerFront) -> Void
    let byteCount: Int

    init(count: Int, next: Int, byteCount: Int, part: @escaping (Int, any WorkerFront) -> Void) {
        self.count = count
        self.next = next
        self.byteCount = byteCount
        self.part = part
    }

    /// Nothing of it can fail: what is made so far may go.
    var holdsReply: Bool { false }

    /// Writes the parts left as far as `processor` lets the connection's replies go; true
    /// when it wrote the last.
    func resume(_ processor: RequestProcessor, on connection: Connection, front: any WorkerFront) -> Bool {
        while next < count {
            if processor.repliesMustPause(connection) { return false }
            part(next, front)
            next += 1
        }
        return true
    }
}

extension RequestProcessor {
    /// Writes the `count` parts of a job's answer (`part`) through `front`, as far as the
    /// connection's replies may go; the rest is kept as its unfinished reply, holding
    /// `heldBytes` of the job.
    func writeParts(_ count: Int, heldBytes: Int, on connection: Connection, front: any WorkerFront,
                    part: @escaping (Int, any WorkerFront) -> Void) {
        let answer = UnfinishedAnswer(count: count, next: 0, byteCount: heldBytes, part: part)
        if !answer.resume(self, on: connection, front: front) { connection.unfinishedReply = answer }
    }

    /// Writes a fetched or listed read's answer: what comes before its parts, then its parts.
    func writeAnswer(of job: ReadJob, through front: any WorkerFront) {
        job.answer.write(job, through: front)
        // Checked here: the closure is made only for an answer that has parts.
        let parts = job.answer.partCount(of: job)
        if parts > 0 {
            writeParts(parts, heldBytes: job.heldBytes, on: job.connection, front: front) {
                job.answer.writePart($0, of: job, through: $1)
            }
        }
    }
}

extension ReadAnswer {
    /// An answer that `write` writes whole has no parts.
    public func partCount(of job: ReadJob) -> Int { 0 }

    public func writePart(_ index: Int, of job: ReadJob, through front: any WorkerFront) {
        preconditionFailure("\(Self.self) is written whole")
    }
}

extension WriteAnswer {
    /// An answer that `write` writes whole has no parts.
    package func partCount(of job: WriteJob) -> Int { 0 }

    package func writePart(_ index: Int, of job: WriteJob, through front: any WorkerFront) {
        preconditionFailure("\(Self.self) is written whole")
    }
}
