import WireBytes
/// A request whose arguments passed every check, ready to execute.
///
/// Payloads point into the line buffer given to `RequestDecoder.decode`; use them on
/// that thread while the buffer is unchanged. Long lists stay in the decoder: read
/// them with `RequestDecoder.argument(_:)`.
public enum Command {
    case ping, count, stats, flushall, quit
    case get(UnsafeRawBufferPointer)
    case exists(UnsafeRawBufferPointer)
    case del(UnsafeRawBufferPointer)
    /// The ids are `argument(0)` through `argument(count - 1)`, 1 to 1,000 of them.
    case mget(count: Int)
    case set(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer)
    /// Triple i is `argument(3 * i)`, `argument(3 * i + 1)`, `argument(3 * i + 2)`:
    /// userId, name, portraitUri; 1 to 1,000 triples.
    case mset(triples: Int)
    /// At least one of `name` and `portraitUri` is present.
    case update(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer?, portraitUri: UnsafeRawBufferPointer?)
    case recent(limit: Int)
    /// `after` may be empty: scan from the first userId.
    case scan(after: UnsafeRawBufferPointer, limit: Int)
    case auth(token: UnsafeRawBufferPointer)
}

extension RequestDecoder {
    /// Checks the arguments of the request `decode` just returned and builds its command.
    ///
    /// All ARGS checks of the request come before any TOOLARGE check, so a request
    /// with both faults is ARGS. Allocates nothing.
    ///
    /// - Precondition: The last `decode` returned `.request`.
    /// - Returns: The command, or an ARGS or TOOLARGE error.
    public func command() -> Result<Command, ProtocolError> {
        guard let verb else {
            preconditionFailure("command() needs a line that decoded as a request")
        }
        let argc = argumentCount
        switch verb {
        case .ping, .count, .stats, .flushall, .quit:
            guard argc == 0 else {
                return .failure(ProtocolError(.args, verb.usage))
            }
            switch verb {
            case .ping: return .success(.ping)
            case .count: return .success(.count)
            case .stats: return .success(.stats)
            case .flushall: return .success(.flushall)
            default: return .success(.quit)
            }

        case .get, .exists, .del:
            guard argc == 1 else {
                return .failure(ProtocolError(.args, verb.usage))
            }
            let userId = argument(0)
            if let error = checkUserId(userId) {
                return .failure(error)
            }
            switch verb {
            case .get: return .success(.get(userId))
            case .exists: return .success(.exists(userId))
            default: return .success(.del(userId))
            }

        case .mget:
            return mgetCommand(argc)

        case .set:
            guard argc == 3 else {
                return .failure(ProtocolError(.args, verb.usage))
            }
            if let error = checkTriple(at: 0) {
                return .failure(error)
            }
            return .success(.set(userId: argument(0), name: argument(1), portraitUri: argument(2)))

        case .mset:
            return msetCommand(argc)

        case .update:
            return updateCommand(argc)

        case .recent:
            switch argc {
            case 0:
                return .success(.recent(limit: Limits.recentDefault))
            case 1:
                guard let limit = parseLimit(argument(0)) else {
                    return .failure(.badLimit)
                }
                return .success(.recent(limit: limit))
            default:
                return .failure(ProtocolError(.args, verb.usage))
            }

        case .scan:
            guard argc == 1 || argc == 2 else {
                return .failure(ProtocolError(.args, verb.usage))
            }
            var limit = Limits.scanDefault
            if argc == 2 {
                guard let given = parseLimit(argument(1)) else {
                    return .failure(.badLimit)
                }
                limit = given
            }
            let after = argument(0)
            guard after.count <= Limits.userId else {
                return .failure(.userIdTooLarge)
            }
            return .success(.scan(after: after, limit: limit))

        case .auth:
            guard argc == 1 else {
                return .failure(ProtocolError(.args, verb.usage))
            }
            return .success(.auth(token: argument(0)))
        }
    }

    private func mgetCommand(_ argc: Int) -> Result<Command, ProtocolError> {
        guard argc > 0 else {
            return .failure(ProtocolError(.args, Verb.mget.usage))
        }
        let stored = min(argc, Self.tokenCapacity - 1)
        for i in 0..<stored where argument(i).count == 0 {
            return .failure(.emptyUserId)
        }
        if emptyUnstoredPositions != 0 {
            return .failure(.emptyUserId)
        }
        guard argc <= Limits.maxIds else {
            return .failure(.tooManyIds)
        }
        for i in 0..<argc where argument(i).count > Limits.userId {
            return .failure(.userIdTooLarge)
        }
        return .success(.mget(count: argc))
    }

    private func msetCommand(_ argc: Int) -> Result<Command, ProtocolError> {
        guard argc > 0 && argc % 3 == 0 else {
            return .failure(ProtocolError(.args, Verb.mset.usage))
        }
        let stored = min(argc, Self.tokenCapacity - 1)
        for i in stride(from: 0, to: stored, by: 3) where argument(i).count == 0 {
            return .failure(.emptyUserId)
        }
        if emptyUnstoredPositions & 1 != 0 {
            return .failure(.emptyUserId)
        }
        let triples = argc / 3
        guard triples <= Limits.maxTriples else {
            return .failure(.tooManyTriples)
        }
        for i in stride(from: 0, to: argc, by: 3) {
            if let error = checkTriple(at: i) {
                return .failure(error)
            }
        }
        return .success(.mset(triples: triples))
    }

    private func updateCommand(_ argc: Int) -> Result<Command, ProtocolError> {
        guard argc == 3 || argc == 5 else {
            return .failure(ProtocolError(.args, Verb.update.usage))
        }
        let userId = argument(0)
        guard userId.count > 0 else {
            return .failure(.emptyUserId)
        }
        // Argument index of each field's value; 0 (the userId's index) means absent.
        var nameIndex = 0
        var portraitUriIndex = 0
        for i in stride(from: 1, to: argc, by: 2) {
            let field = argument(i)
            if bytesEqual(field, "name") && nameIndex == 0 {
                nameIndex = i + 1
            } else if bytesEqual(field, "portraitUri") && portraitUriIndex == 0 {
                portraitUriIndex = i + 1
            } else {
                return .failure(.badField)
            }
        }
        guard userId.count <= Limits.userId else {
            return .failure(.userIdTooLarge)
        }
        // TOOLARGE reports the first value over its limit, in request order.
        for i in stride(from: 2, to: argc, by: 2) {
            let isName = i == nameIndex
            if argument(i).count > (isName ? Limits.name : Limits.portraitUri) {
                return .failure(isName ? .nameTooLarge : .portraitUriTooLarge)
            }
        }
        let name = nameIndex == 0 ? nil : argument(nameIndex)
        let portraitUri = portraitUriIndex == 0 ? nil : argument(portraitUriIndex)
        return .success(.update(userId: userId, name: name, portraitUri: portraitUri))
    }

    /// The ARGS and TOOLARGE check of one userId.
    private func checkUserId(_ userId: UnsafeRawBufferPointer) -> ProtocolError? {
        if userId.count == 0 {
            return .emptyUserId
        }
        if userId.count > Limits.userId {
            return .userIdTooLarge
        }
        return nil
    }

    /// The TOOLARGE checks of the triple starting at argument `first`, in request
    /// order; its userId is already known not to be empty.
    private func checkTriple(at first: Int) -> ProtocolError? {
        if let error = checkUserId(argument(first)) {
            return error
        }
        if argument(first + 1).count > Limits.name {
            return .nameTooLarge
        }
        if argument(first + 2).count > Limits.portraitUri {
            return .portraitUriTooLarge
        }
        return nil
    }
}

/// Reads a RECENT or SCAN count: 1 to 9 ASCII digits, no sign, valued 1...1,000.
private func parseLimit(_ token: UnsafeRawBufferPointer) -> Int? {
    guard token.count >= 1 && token.count <= Limits.maxDigits else {
        return nil
    }
    var value = 0
    for b in token {
        let digit = b &- UInt8(ascii: "0")
        guard digit < 10 else {
            return nil
        }
        value = value * 10 + Int(digit)
    }
    return value >= 1 && value <= Limits.maxCount ? value : nil
}

extension ProtocolError {
    static var emptyUserId: ProtocolError { ProtocolError(.args, "empty userId") }
    static var badLimit: ProtocolError { ProtocolError(.args, "n must be a number from 1 to 1000") }
    static var badField: ProtocolError { ProtocolError(.args, "fields are name and portraitUri, each at most once") }
    static var userIdTooLarge: ProtocolError { ProtocolError(.tooLarge, "userId exceeds 128 bytes") }
    static var nameTooLarge: ProtocolError { ProtocolError(.tooLarge, "name exceeds 256 bytes") }
    static var portraitUriTooLarge: ProtocolError { ProtocolError(.tooLarge, "portraitUri exceeds 2048 bytes") }
    static var tooManyIds: ProtocolError { ProtocolError(.tooLarge, "count exceeds 1000 ids") }
    static var tooManyTriples: ProtocolError { ProtocolError(.tooLarge, "count exceeds 1000 triples") }
}
