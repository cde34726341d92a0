import ProfileModel
import ProfileProtocol
import ProfileStore
import RESPProtocol

/// A RESP request that goes to the writer: one write command, or an EXEC's queued commands.
/// It names the store operations each command needs, and keeps what the commit said about
/// them for the answer.
///
/// Made by a worker, filled in by the writer (`record`), answered by the same worker: the
/// job's hand-offs order the accesses.
final class RESPWrite {
    /// A command to answer: where its arguments are in the job, and its operations.
    struct Command {
        var name: RESPCommandName
        var firstArgument: Int
        var argumentCount: Int
        var firstOperation: Int
        var operationCount: Int
    }

    /// What the commit did to one operation.
    struct Result {
        var before: ProfileState
        var after: ProfileState
        /// For a read: where its values were copied in `readValues`.
        var name: Range<Int> = 0..<0
        var portraitUri: Range<Int> = 0..<0
    }

    let isTransaction: Bool
    /// Bytes of `--resp-key-prefix` before each key's userId.
    let keyPrefixLength: Int
    private(set) var operations: [JobOperation] = []
    private(set) var commands: [Command] = []
    private(set) var results: [Result] = []
    /// The values the transaction's reads found, copied while the commit's views were valid.
    private(set) var readValues: [UInt8] = []

    init(isTransaction: Bool, keyPrefixLength: Int) {
        self.isTransaction = isTransaction
        self.keyPrefixLength = keyPrefixLength
    }

    /// Adds a command whose arguments (checked already) are `first..<first + count` of the
    /// job's, with the operations it needs: none for a command that reads no key, one read
    /// per key for a key read (none for a key that names no profile).
    func add(_ command: RESPCommandName, first: Int, count: Int,
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

    /// The store's operation `index`, its key's prefix skipped.
    func operation(at index: Int, _ argument: (Int) -> UnsafeRawBufferPointer) -> WriteOperation {
        operations[index].writeOperation(argument, keyPrefix: keyPrefixLength)
    }

    /// Takes in what the commit did; the writer's thread, while `outcomes` is valid.
    func record(_ outcomes: WriteOutcomes) {
        results.reserveCapacity(operations.count)
        for index in operations.indices {
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
    func values(ofRead index: Int) -> ProfileValues? {
        let result = results[index]
        guard result.before.exists else { return nil }
        return readValues.withUnsafeBytes { bytes in
            ProfileValues(name: UnsafeRawBufferPointer(rebasing: bytes[result.name]),
                       portraitUri: UnsafeRawBufferPointer(rebasing: bytes[result.portraitUri]))
        }
    }
}

extension ProfileState {
    func has(_ field: ProfileField) -> Bool {
        guard case .present(let hasName, let hasPortraitUri) = self else { return false }
        return field == .name ? hasName : hasPortraitUri
    }
}

extension Worker {
    /// Sends a checked write command to the writer; it is answered when committed.
    func submitRESPWrite(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>,
                         _ connection: Connection) {
        let write = RESPWrite(isTransaction: false, keyPrefixLength: context.configuration.respKeyPrefix.count)
        write.add(command, first: 0, count: arguments.count, argument: { arguments[$0] }, names: { self.context.respKeyspace.userId(ofKey: $0) != nil })
        submit(WriteJob(connection: connection, request: .resp(write), verb: command.verb, arguments: arguments.count) {
            arguments[$0]
        }, connection)
    }

    /// Sends an EXEC's queued commands to the writer as one unit: their writes commit
    /// together, all or nothing, and their reads see the writes queued before them.
    func submitRESPTransaction(_ transaction: RESPTransaction, _ connection: Connection) {
        let write = RESPWrite(isTransaction: true, keyPrefixLength: context.configuration.respKeyPrefix.count)
        let queued = transaction.arguments
        var ends: [Int] = []
        var end = 0
        for argument in queued {
            end += argument.count
            ends.append(end)
        }
        let job = queued.flatMap { $0 }.withUnsafeBytes { all in
            WriteJob(connection: connection, request: .resp(write), verb: RESPCommandName.exec.verb,
                     arguments: queued.count) { index in
                UnsafeRawBufferPointer(rebasing: all[(index == 0 ? 0 : ends[index - 1])..<ends[index]])
            }
        }
        for queued in transaction.commands {
            write.add(queued.command, first: queued.first, count: queued.count, argument: { job.argument($0) },
                      names: { self.context.respKeyspace.userId(ofKey: $0) != nil })
        }
        submit(job, connection)
    }

    /// Writes the answer of a committed (or failed) RESP write: each command's reply, in an
    /// array for a transaction.
    func writeRESPAnswer(_ job: WriteJob, _ write: RESPWrite) {
        let connection = job.connection
        if let failure = job.failure {
            respStoreFailure(failure, connection)
            return
        }
        if write.isTransaction { respArrayHeader(write.commands.count, connection) }
        for command in write.commands { answer(command, job, write, connection) }
    }

    private func answer(_ command: RESPWrite.Command, _ job: WriteJob, _ write: RESPWrite, _ connection: Connection) {
        let first = command.firstArgument
        let count = command.argumentCount
        let results = write.results[command.firstOperation..<command.firstOperation + command.operationCount]
        switch command.name {
        case .hset:
            // Fields that were absent (empty) and hold something now, each counted once.
            var added = 0
            for field in ProfileField.allCases where Self.names(field, job, from: first + 2, to: first + count, stride: 2) {
                if !results.first!.before.has(field) && results.first!.after.has(field) { added += 1 }
            }
            respInteger(added, connection)
        case .hmset:
            respSimple("OK", connection)
        case .hsetnx:
            let field = ProfileField(job.argument(first + 2))!
            respInteger(!results.first!.before.has(field) && results.first!.after.has(field) ? 1 : 0, connection)
        case .hdel:
            var removed = 0
            for field in ProfileField.allCases where Self.names(field, job, from: first + 2, to: first + count, stride: 1) {
                if results.first!.before.has(field) { removed += 1 }
            }
            respInteger(removed, connection)
        case .del, .unlink, .exists:
            var existed = 0
            for result in results where result.before.exists { existed += 1 }
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
                    let values = command.operationCount == 0 ? nil : write.values(ofRead: command.firstOperation)
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
