import ProfileServer
import ProfileModel
import ProfileStore
import RESPProtocol

/// A RESP request that goes to the writer, one write command or an EXEC's queued commands, as
/// its answer needs it: each command, where its arguments and operations are in the job.
///
/// Made by a worker while it builds the job's operations (`add`), used by that worker when the
/// job is answered.
struct RESPWriteAnswer: WriteAnswer {
    /// A command to answer: where its arguments are in the job, and its operations.
    struct Command {
        var name: RESPCommandName
        var firstArgument: Int
        var argumentCount: Int
        var firstOperation: Int
        var operationCount: Int
    }

    let isTransaction: Bool
    private(set) var commands: [Command] = []

    init(isTransaction: Bool) {
        self.isTransaction = isTransaction
    }

    /// Adds a command whose arguments (checked already) are `first..<first + count` of the
    /// job's, and appends the operations it needs to the job's: none for a command that reads
    /// no key, one read per key for a key read (none for a key that names no profile).
    mutating func add(_ command: RESPCommandName, first: Int, count: Int, operations: inout SmallList<JobOperation>,
                      argument: (Int) -> UnsafeRawBufferPointer, names: (UnsafeRawBufferPointer) -> Bool) {
        let firstOperation = operations.count
        let key = first + 1
        switch command {
        case .hset, .hmset:
            var name = JobOperation.Field.keep, portraitUri = JobOperation.Field.keep
            var index = first + 2
            while index + 1 < first + count {
                // The last value given for a field is the one written, as in Redis.
                if ProfileField(argument(index)) == .name { name = .set(index + 1) } else { portraitUri = .set(index + 1) }
                index += 2
            }
            operations.append(JobOperation(kind: .patch(createsMissing: true, removesEmptied: true), userId: key,
                                           name: name, portraitUri: portraitUri))
        case .hsetnx:
            let edit = JobOperation.Field.setIfEmpty(first + 3)
            let isName = ProfileField(argument(first + 2)) == .name
            operations.append(JobOperation(kind: .patch(createsMissing: true, removesEmptied: true), userId: key,
                                           name: isName ? edit : .keep, portraitUri: isName ? .keep : edit))
        case .hdel:
            var name = JobOperation.Field.keep, portraitUri = JobOperation.Field.keep
            for index in first + 2..<first + count {
                if ProfileField(argument(index)) == .name { name = .clear } else { portraitUri = .clear }
            }
            operations.append(JobOperation(kind: .patch(createsMissing: false, removesEmptied: true), userId: key,
                                           name: name, portraitUri: portraitUri))
        case .del, .unlink:
            for index in first + 1..<first + count { operations.append(JobOperation(kind: .remove, userId: index)) }
        case .flushall, .flushdb:
            operations.append(JobOperation(kind: .removeAll, userId: -1))
        case .exists:
            for index in first + 1..<first + count where names(argument(index)) {
                operations.append(JobOperation(kind: .read, userId: index))
            }
        case _ where command.readsKey:
            if names(argument(key)) { operations.append(JobOperation(kind: .read, userId: key)) }
        default:
            break
        }
        commands.append(Command(name: command, firstArgument: first, argumentCount: count,
                                firstOperation: firstOperation, operationCount: operations.count - firstOperation))
    }

    /// The command's reply, or a transaction's array header, whose commands' replies are its
    /// parts; the store's failure otherwise.
    func write(_ job: WriteJob, through front: any WorkerFront) {
        let front = unsafeDowncast(front, to: RESPWorkerFront.self)
        let connection = job.connection
        if let failure = job.failure {
            front.respStoreFailure(failure, connection)
        } else if isTransaction {
            front.respArrayHeader(commands.count, connection)
        } else {
            for command in commands { front.answer(command, of: job, connection) }
        }
    }

    /// A transaction's replies, one a part, made as the client reads.
    func partCount(of job: WriteJob) -> Int {
        isTransaction && job.failure == nil ? commands.count : 0
    }

    func writePart(_ index: Int, of job: WriteJob, through front: any WorkerFront) {
        unsafeDowncast(front, to: RESPWorkerFront.self).answer(commands[index], of: job, job.connection)
    }
}

extension ProfileState {
    func has(_ field: ProfileField) -> Bool {
        guard case .present(let hasName, let hasPortraitUri) = self else { return false }
        return field == .name ? hasName : hasPortraitUri
    }
}

extension RESPWorkerFront {
    /// Sends a checked write command to the writer; it is answered when committed.
    func submitRESPWrite(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                         _ connection: Connection) {
        var answer = RESPWriteAnswer(isTransaction: false)
        var operations = SmallList<JobOperation>()
        answer.add(command, first: 0, count: arguments.count, operations: &operations, argument: { arguments[$0] },
                   names: { self.keyspace.userId(ofKey: $0) != nil })
        processor.submit(WriteJob(connection: connection, operations: operations, keyPrefix: processor.context.configuration.respKeyPrefix.count,
                        answer: answer, kind: command.kind, changeOrigin: connection.resp.id, arguments: arguments.count) { arguments[$0] },
               connection)
    }

    /// Sends an EXEC's queued commands to the writer as one unit: their writes commit
    /// together, all or nothing, and their reads see the writes queued before them.
    func submitRESPTransaction(_ transaction: RESPTransaction, _ connection: Connection) {
        let queued = transaction.arguments
        var ends: [Int] = []
        var end = 0
        for argument in queued {
            end += argument.count
            ends.append(end)
        }
        let job = queued.flatMap { $0 }.withUnsafeBytes { all in
            let argument = { (index: Int) in UnsafeRawBufferPointer(rebasing: all[(index == 0 ? 0 : ends[index - 1])..<ends[index]]) }
            var answer = RESPWriteAnswer(isTransaction: true)
            var operations = SmallList<JobOperation>()
            for command in transaction.commands {
                answer.add(command.command, first: command.first, count: command.count, operations: &operations,
                           argument: argument, names: { self.keyspace.userId(ofKey: $0) != nil })
            }
            return WriteJob(connection: connection, operations: operations, keyPrefix: processor.context.configuration.respKeyPrefix.count,
                            answer: answer, kind: RESPCommandName.exec.kind, changeOrigin: connection.resp.id,
                            arguments: queued.count, argument: argument)
        }
        processor.submit(job, connection)
    }

    /// One committed command's reply, from what the commit did to its operations.
    func answer(_ command: RESPWriteAnswer.Command, of job: WriteJob, _ connection: Connection) {
        let first = command.firstArgument
        let count = command.argumentCount
        let operations = command.firstOperation..<command.firstOperation + command.operationCount
        // A hash write's one operation.
        var only: WriteJob.Result { job.results[command.firstOperation] }
        switch command.name {
        case .hset:
            // Fields that were absent (empty) and hold something now, each counted once.
            var added = 0
            for field in ProfileField.allCases where Self.names(field, job, from: first + 2, to: first + count, stride: 2) {
                if !only.before.has(field) && only.after.has(field) { added += 1 }
            }
            respInteger(added, connection)
        case .hmset:
            respSimple("OK", connection)
        case .hsetnx:
            let field = ProfileField(job.argument(first + 2))!
            respInteger(!only.before.has(field) && only.after.has(field) ? 1 : 0, connection)
        case .hdel:
            var removed = 0
            for field in ProfileField.allCases where Self.names(field, job, from: first + 2, to: first + count, stride: 1) {
                if only.before.has(field) { removed += 1 }
            }
            respInteger(removed, connection)
        case .del, .unlink, .exists:
            var existed = 0
            for index in operations where job.results[index].before.exists { existed += 1 }
            respInteger(existed, connection)
        case .flushall, .flushdb:
            respSimple("OK", connection)
        default:
            // A read runs at its turn, after the writes queued before it: a key's from what the
            // commit saw, any other now.
            var views: [UnsafeRawBufferPointer] = []
            views.reserveCapacity(count)
            for index in first..<first + count { views.append(job.argument(index)) }
            views.withUnsafeBufferPointer { arguments in
                if command.name.readsKey {
                    let values = command.operationCount == 0 ? nil : job.values(ofRead: command.firstOperation)
                    writeKeyRead(command.name, arguments, values, connection)
                } else {
                    executeRESP(command.name, arguments, connection, inTransaction: true)
                }
            }
        }
    }

    /// Whether the job's arguments from `first` up to `end`, `stride` apart, name `field`.
    private static func names(_ field: ProfileField, _ job: WriteJob, from first: Int, to end: Int, stride: Int) -> Bool {
        var index = first
        while index < end {
            if ProfileField(job.argument(index)) == field { return true }
            index += stride
        }
        return false
    }
}
