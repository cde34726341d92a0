import WireBytes

/// A command of the RESP front, as named by a request's first argument.
///
/// A plain value; any thread may use it.
public enum RESPCommandName: UInt8, Sendable, CaseIterable {
    case ping, echo, hello, auth, select, quit, client, info, dbsize, command, config
    case hget, hmget, hgetall, hexists, hlen, hstrlen, hkeys, hvals
    case hset, hmset, hsetnx, hdel
    case del, unlink, exists, type, ttl, pttl, scan, flushall, flushdb
    case multi, exec, discard, watch, unwatch
    case subscribe, unsubscribe

    /// The name in lower case, as Redis's own messages print it (`wrong number of
    /// arguments for 'hget' command`).
    public var name: StaticString {
        switch self {
        case .ping: "ping"
        case .echo: "echo"
        case .hello: "hello"
        case .auth: "auth"
        case .select: "select"
        case .quit: "quit"
        case .client: "client"
        case .info: "info"
        case .dbsize: "dbsize"
        case .command: "command"
        case .config: "config"
        case .hget: "hget"
        case .hmget: "hmget"
        case .hgetall: "hgetall"
        case .hexists: "hexists"
        case .hlen: "hlen"
        case .hstrlen: "hstrlen"
        case .hkeys: "hkeys"
        case .hvals: "hvals"
        case .hset: "hset"
        case .hmset: "hmset"
        case .hsetnx: "hsetnx"
        case .hdel: "hdel"
        case .del: "del"
        case .unlink: "unlink"
        case .exists: "exists"
        case .type: "type"
        case .ttl: "ttl"
        case .pttl: "pttl"
        case .scan: "scan"
        case .flushall: "flushall"
        case .flushdb: "flushdb"
        case .multi: "multi"
        case .exec: "exec"
        case .discard: "discard"
        case .watch: "watch"
        case .unwatch: "unwatch"
        case .subscribe: "subscribe"
        case .unsubscribe: "unsubscribe"
        }
    }

    /// Finds the command `argument` names, ignoring ASCII case; nil when it names none.
    /// Names of 3 to 8 letters are one word each (`lowercasedNameWord`); the two longer ones,
    /// which no request on the hot path names, are compared letter by letter.
    public static func lookup(_ argument: UnsafeRawBufferPointer) -> RESPCommandName? {
        guard let word = lowercasedNameWord(argument) else {
            if RESPKeyword.matches(argument, "SUBSCRIBE") { return .subscribe }
            if RESPKeyword.matches(argument, "UNSUBSCRIBE") { return .unsubscribe }
            return nil
        }
        return switch word {
        case 0x67_6e_69_70: .ping
        case 0x6f_68_63_65: .echo
        case 0x6f_6c_6c_65_68: .hello
        case 0x68_74_75_61: .auth
        case 0x74_63_65_6c_65_73: .select
        case 0x74_69_75_71: .quit
        case 0x74_6e_65_69_6c_63: .client
        case 0x6f_66_6e_69: .info
        case 0x65_7a_69_73_62_64: .dbsize
        case 0x64_6e_61_6d_6d_6f_63: .command
        case 0x67_69_66_6e_6f_63: .config
        case 0x74_65_67_68: .hget
        case 0x74_65_67_6d_68: .hmget
        case 0x6c_6c_61_74_65_67_68: .hgetall
        case 0x73_74_73_69_78_65_68: .hexists
        case 0x6e_65_6c_68: .hlen
        case 0x6e_65_6c_72_74_73_68: .hstrlen
        case 0x73_79_65_6b_68: .hkeys
        case 0x73_6c_61_76_68: .hvals
        case 0x74_65_73_68: .hset
        case 0x74_65_73_6d_68: .hmset
        case 0x78_6e_74_65_73_68: .hsetnx
        case 0x6c_65_64_68: .hdel
        case 0x6c_65_64: .del
        case 0x6b_6e_69_6c_6e_75: .unlink
        case 0x73_74_73_69_78_65: .exists
        case 0x65_70_79_74: .type
        case 0x6c_74_74: .ttl
        case 0x6c_74_74_70: .pttl
        case 0x6e_61_63_73: .scan
        case 0x6c_6c_61_68_73_75_6c_66: .flushall
        case 0x62_64_68_73_75_6c_66: .flushdb
        case 0x69_74_6c_75_6d: .multi
        case 0x63_65_78_65: .exec
        case 0x64_72_61_63_73_69_64: .discard
        case 0x68_63_74_61_77: .watch
        case 0x68_63_74_61_77_6e_75: .unwatch
        default: nil
        }
    }
}

/// Matches arguments against the words of a command's syntax, such as subcommands and
/// options (`SETNAME`, `MATCH`, `ASYNC`), which Redis reads in any ASCII case.
///
/// Stateless; any thread may use it.
public enum RESPKeyword {
    /// Whether `argument` is `keyword` in any ASCII case, without allocating.
    ///
    /// - Parameter keyword: ASCII; its letters may be in either case, its other bytes must
    ///   match exactly (`LIB-NAME`).
    public static func matches(_ argument: UnsafeRawBufferPointer, _ keyword: StaticString) -> Bool {
        let count = keyword.utf8CodeUnitCount
        guard argument.count == count else {
            return false
        }
        let word = keyword.utf8Start
        for i in 0..<count {
            let a = argument[i]
            let k = word[i]
            if a != k {
                // Different bytes match only as the two cases of one letter.
                let lowered = k | 0x20
                guard a | 0x20 == lowered, lowered >= UInt8(ascii: "a"), lowered <= UInt8(ascii: "z") else {
                    return false
                }
            }
        }
        return true
    }
}
