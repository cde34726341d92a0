import ProfileModel
import WireBytes

/// A command of the protocol, as named by a request's first token.
///
/// A plain value; any thread may use it.
public enum Verb: UInt8, Sendable, CaseIterable {
    case ping, get, mget, set, mset, update, del, exists, count, recent, scan, stats, auth, flushall, quit

    /// The least role allowed to run the command. PING, AUTH and QUIT need none, so a
    /// connection can always authenticate and leave.
    public var requiredRole: Role {
        switch self {
        case .ping, .auth, .quit: .none
        case .get, .mget, .exists, .count, .recent, .scan, .stats: .read
        case .set, .mset, .update, .del: .write
        case .flushall: .admin
        }
    }

    /// Whether the command changes stored data.
    public var isWrite: Bool {
        switch self {
        case .set, .mset, .update, .del, .flushall: true
        default: false
        }
    }

    /// The verb in upper case, as documented.
    public var name: StaticString {
        switch self {
        case .ping: "PING"
        case .get: "GET"
        case .mget: "MGET"
        case .set: "SET"
        case .mset: "MSET"
        case .update: "UPDATE"
        case .del: "DEL"
        case .exists: "EXISTS"
        case .count: "COUNT"
        case .recent: "RECENT"
        case .scan: "SCAN"
        case .stats: "STATS"
        case .auth: "AUTH"
        case .flushall: "FLUSHALL"
        case .quit: "QUIT"
        }
    }

    /// The request's shape; the message of an ARGS error for a wrong argument count.
    public var usage: StaticString {
        switch self {
        case .ping: "usage: PING"
        case .get: "usage: GET <userId>"
        case .mget: "usage: MGET <userId> [<userId> ...]"
        case .set: "usage: SET <userId> <name> <portraitUri>"
        case .mset: "usage: MSET <userId> <name> <portraitUri> [<userId> <name> <portraitUri> ...]"
        case .update: "usage: UPDATE <userId> <field> <value> [<field> <value>]"
        case .del: "usage: DEL <userId>"
        case .exists: "usage: EXISTS <userId>"
        case .count: "usage: COUNT"
        case .recent: "usage: RECENT [<n>]"
        case .scan: "usage: SCAN <after> [<n>]"
        case .stats: "usage: STATS"
        case .auth: "usage: AUTH <token>"
        case .flushall: "usage: FLUSHALL"
        case .quit: "usage: QUIT"
        }
    }

    /// The verb `token` names, ignoring ASCII case; nil when it names none. Every verb is 3
    /// to 8 bytes: one word each (`lowercasedNameWord`).
    static func lookup(_ token: UnsafeRawBufferPointer) -> Verb? {
        guard let word = lowercasedNameWord(token) else { return nil }
        switch word {
        case 0x74_65_67: return .get
        case 0x74_65_73: return .set
        case 0x6c_65_64: return .del
        case 0x67_6e_69_70: return .ping
        case 0x74_65_67_6d: return .mget
        case 0x74_65_73_6d: return .mset
        case 0x6e_61_63_73: return .scan
        case 0x68_74_75_61: return .auth
        case 0x74_69_75_71: return .quit
        case 0x74_6e_75_6f_63: return .count
        case 0x73_74_61_74_73: return .stats
        case 0x65_74_61_64_70_75: return .update
        case 0x73_74_73_69_78_65: return .exists
        case 0x74_6e_65_63_65_72: return .recent
        case 0x6c_6c_61_68_73_75_6c_66: return .flushall
        default: return nil
        }
    }
}
