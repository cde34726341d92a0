import ProfileModel
import WireBytes

// What each RESP command is, as the codec knows it: its arity, the role it needs, whether it
// writes or reads a key. The server decides what to do with a request from these alone.

extension RESPCommandName {
    /// Redis's arity: n means exactly n arguments, the name included; -n at least n.
    public var arity: Int {
        switch self {
        case .ping, .hello, .quit, .info, .command, .flushall, .flushdb, .unsubscribe: -1
        case .dbsize, .multi, .exec, .discard, .unwatch: 1
        case .echo, .select, .hgetall, .hlen, .hkeys, .hvals, .type, .ttl, .pttl: 2
        case .auth, .client, .del, .unlink, .exists, .scan, .watch, .subscribe: -2
        case .hget, .hexists, .hstrlen: 3
        case .config, .hmget, .hdel: -3
        case .hset, .hmset: -4
        case .hsetnx: 4
        }
    }

    /// Redis's arity rule, with HSET's and HMSET's field-value pairs.
    public func arityAllows(_ count: Int) -> Bool {
        guard arity >= 0 ? count == arity : count >= -arity else { return false }
        switch self {
        case .hset, .hmset: return count % 2 == 0
        default: return true
        }
    }

    /// The least role allowed to run it: `read` for everything that changes nothing.
    public var requiredRole: Role {
        switch self {
        case .ping, .hello, .auth, .quit: .none
        case .hset, .hmset, .hsetnx, .hdel, .del, .unlink: .write
        case .flushall, .flushdb: .admin
        default: .read
        }
    }

    /// Whether it changes stored data, and so goes to the writer.
    public var isWrite: Bool {
        switch self {
        case .hset, .hmset, .hsetnx, .hdel, .del, .unlink, .flushall, .flushdb: true
        default: false
        }
    }

    /// Whether its reply depends on one key's profile: inside a transaction it reads the
    /// profile as the writes queued before it left it.
    public var readsKey: Bool {
        switch self {
        case .hget, .hmget, .hgetall, .hexists, .hlen, .hstrlen, .hkeys, .hvals, .type, .ttl, .pttl: true
        default: false
        }
    }

    /// The NOPERM error of a connection whose role does not allow it.
    public var noPermission: RESPProblem {
        let name = self.name
        return .text([textBytes("NOPERM User default has no permissions to run the '"),
                      UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), textBytes("' command")])
    }
}

/// Why a command cannot run: its error reply, without the leading `-`.
///
/// A plain value; the thread that made it uses it.
public enum RESPProblem: Error {
    case fixed(StaticString)
    case made([UInt8])

    public static func text(_ parts: [UnsafeRawBufferPointer]) -> RESPProblem {
        .made(parts.flatMap { Array($0) })
    }
}

/// Redis's texts, and profiled's own for what Redis does not have.
public enum RESPText {
    public static let noAuth: StaticString = "NOAUTH Authentication required."
    public static let wrongPass: StaticString = "WRONGPASS invalid username-password pair or user is disabled."
    public static let syntax: StaticString = "ERR syntax error"
    public static let notInteger: StaticString = "ERR value is not an integer or out of range"
    public static let dbIndex: StaticString = "ERR DB index is out of range"
    public static let execWithoutMulti: StaticString = "ERR EXEC without MULTI"
    public static let discardWithoutMulti: StaticString = "ERR DISCARD without MULTI"
    public static let nestedMulti: StaticString = "ERR MULTI calls can not be nested"
    public static let execAbort: StaticString = "EXECABORT Transaction discarded because of previous errors."
    public static let watchInMulti: StaticString = "ERR WATCH inside MULTI is not allowed"
    public static let watchUnsupported: StaticString =
        "ERR WATCH is not supported: the writes of a MULTI ... EXEC commit together, all or nothing"
    public static let noProto: StaticString = "NOPROTO unsupported protocol version"
    public static let protocolVersion: StaticString = "ERR Protocol version is not an integer or out of range"
    public static let invalidCursor: StaticString = "ERR invalid cursor"
    public static let clientName: StaticString = "ERR Client names cannot contain spaces, newlines or special characters."
    public static let tooMany: StaticString = "ERR too many keys or fields: at most 1000 in one command"
    public static let transactionFull: StaticString = "ERR a transaction holds at most 1000 commands"
    public static let transactionTooLarge: StaticString = "ERR a transaction holds at most 4 MiB of queued commands"
    public static let transactionRepliesTooLarge: StaticString = "ERR a transaction's replies may take at most 16 MiB"
    public static let maxClients: StaticString = "ERR max number of clients reached"
    public static let scanInSharedTransaction: StaticString = "ERR SCAN cannot be queued in a transaction over a shared store (--postgres)"
}
