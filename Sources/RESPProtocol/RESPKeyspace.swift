import Glibc
import ProfileModel
import WireBytes

/// How RESP keys name profiles (`--resp-key-prefix`, then a userId), and the checks a
/// command's keys, fields and values pass before the server acts on it.
///
/// Immutable; any thread may use it.
public struct RESPKeyspace: Sendable {
    /// The bytes every profile's key starts with; empty for none.
    public let prefix: [UInt8]
    /// `prefix.count`, read on every key without touching the array.
    @usableFromInline let prefixCount: Int

    public init(prefix: [UInt8]) {
        self.prefix = prefix
        prefixCount = prefix.count
    }

    /// The userId a key names, or nil when it names none: without the prefix, or not a
    /// userId (1 to 128 bytes of UTF-8 without NUL).
    public func userId(ofKey key: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        guard let id = possibleUserId(ofKey: key), Self.isUserId(id) else { return nil }
        return id
    }

    /// What follows the prefix, when it is 1 to 128 bytes: a userId if `isUserId` says so.
    /// A read looks it up in the cache first, which holds only userIds, and checks it only
    /// when the cache does not know it.
    @inlinable @inline(__always)
    public func possibleUserId(ofKey key: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        guard key.count > prefixCount, key.count - prefixCount <= ProfileLimits.userId else { return nil }
        if prefixCount != 0 {
            let matches = prefix.withUnsafeBytes { memcmp($0.baseAddress!, key.baseAddress!, prefixCount) == 0 }
            guard matches else { return nil }
        }
        return UnsafeRawBufferPointer(start: key.baseAddress! + prefixCount, count: key.count - prefixCount)
    }

    /// Whether 1 to 128 bytes are a userId: UTF-8 without NUL.
    public static func isUserId(_ id: UnsafeRawBufferPointer) -> Bool {
        memchr(id.baseAddress!, 0, id.count) == nil && isValidUTF8(id.baseAddress!, count: id.count)
    }

    /// What stops a command that changes nothing from being queued in a transaction: only
    /// unknown fields and counts over the limit (a key that names no profile reads as absent).
    public func checkRead(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> RESPProblem? {
        switch command {
        case .hget, .hexists, .hstrlen:
            return Self.checkFields(arguments, from: 2, stride: 1)
        case .hmget:
            if arguments.count - 2 > ProfileLimits.idsPerRequest { return .fixed(RESPText.tooMany) }
            return Self.checkFields(arguments, from: 2, stride: 1)
        case .exists:
            return arguments.count - 1 > ProfileLimits.idsPerRequest ? .fixed(RESPText.tooMany) : nil
        default:
            return nil
        }
    }

    /// What stops a write: a key that names no profile, an unknown field, a value over its
    /// limit or not UTF-8 without NUL, too many keys or fields, or a bad option.
    public func checkWrite(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> RESPProblem? {
        switch command {
        case .hset, .hmset, .hsetnx:
            if command != .hsetnx && (arguments.count - 2) / 2 > ProfileLimits.idsPerRequest { return .fixed(RESPText.tooMany) }
            if userId(ofKey: arguments[1]) == nil { return invalidKey(arguments[1]) }
            var index = 2
            while index + 1 < arguments.count {
                guard let field = ProfileField(arguments[index]) else { return Self.unknownField(arguments[index]) }
                if let problem = Self.checkValue(arguments[index + 1], of: field) { return problem }
                index += 2
            }
            return nil
        case .hdel:
            if arguments.count - 2 > ProfileLimits.idsPerRequest { return .fixed(RESPText.tooMany) }
            if userId(ofKey: arguments[1]) == nil { return invalidKey(arguments[1]) }
            return Self.checkFields(arguments, from: 2, stride: 1)
        case .del, .unlink:
            if arguments.count - 1 > ProfileLimits.idsPerRequest { return .fixed(RESPText.tooMany) }
            for key in arguments.dropFirst() where userId(ofKey: key) == nil { return invalidKey(key) }
            return nil
        case .flushall, .flushdb:
            if arguments.count > 2 { return .fixed(RESPText.syntax) }
            if arguments.count == 2 && !RESPKeyword.matches(arguments[1], "ASYNC") && !RESPKeyword.matches(arguments[1], "SYNC") {
                return .fixed(RESPText.syntax)
            }
            return nil
        default:
            return nil
        }
    }

    /// The most bytes a successful reply of `command` (or one of its errors) can take: what a
    /// transaction's replies are bounded by before EXEC runs them.
    public func replyBound(_ command: RESPCommandName, _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Int {
        // A bulk string of the longest value, its length line included.
        let value = ProfileLimits.portraitUri + 16
        let bound = switch command {
        case .hmget: 16 + (arguments.count - 2) * value
        case .hget: value
        case .hgetall, .hkeys, .hvals: 64 + 2 * value
        case .ping, .echo: 16 + arguments[arguments.count - 1].count
        case .scan: 64 + ProfileLimits.rowsPerListing * (prefix.count + ProfileLimits.userId + 16)
        case .info, .hello, .config, .client: 4096
        default: 0
        }
        // Every error this codec words: a key or a field quoted, at most 64 and 128 bytes.
        return max(bound, 512)
    }

    private func invalidKey(_ key: UnsafeRawBufferPointer) -> RESPProblem {
        var text = Array("ERR invalid key '".utf8) + Array(key.prefix(64)) + Array("': a profile's key is ".utf8)
        if !prefix.isEmpty { text += Array("the prefix '".utf8) + prefix + Array("' and then ".utf8) }
        text += Array("a userId of 1 to 128 bytes of UTF-8 without NUL".utf8)
        return .made(text)
    }

    private static func unknownField(_ field: UnsafeRawBufferPointer) -> RESPProblem {
        .made(Array("ERR unknown profile field '".utf8) + Array(field.prefix(128))
              + Array("' (fields are name and portraitUri)".utf8))
    }

    /// Checks the fields named from argument `first` on, `stride` apart.
    private static func checkFields(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, from first: Int,
                                    stride: Int) -> RESPProblem? {
        var index = first
        while index < arguments.count {
            if ProfileField(arguments[index]) == nil { return unknownField(arguments[index]) }
            index += stride
        }
        return nil
    }

    private static func checkValue(_ value: UnsafeRawBufferPointer, of field: ProfileField) -> RESPProblem? {
        let label = Array(textBytes(field.label))
        if value.count > field.limit {
            return .made(Array("ERR the value of '".utf8) + label + Array("' is over \(field.limit) bytes".utf8))
        }
        if value.count > 0 && (memchr(value.baseAddress!, 0, value.count) != nil || !isValidUTF8(value.baseAddress!, count: value.count)) {
            return .made(Array("ERR the value of '".utf8) + label + Array("' is not UTF-8 without NUL".utf8))
        }
        return nil
    }
}

/// Readings of single arguments, as Redis reads them.
///
/// Stateless; any thread.
public enum RESPArgument {
    /// A decimal argument as Redis's `string2ll` reads it, or nil.
    public static func integer(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count > 0, bytes.count <= 20 else { return nil }
        var negative = false
        var index = 0
        if bytes[0] == UInt8(ascii: "-") {
            negative = true
            index = 1
            guard bytes.count > 1 else { return nil }
        }
        if bytes[index] == UInt8(ascii: "0") && bytes.count > index + 1 { return nil }
        var value = 0
        while index < bytes.count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            let (times, overflowTimes) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowSum) = negative ? times.subtractingReportingOverflow(Int(digit))
                : times.addingReportingOverflow(Int(digit))
            guard !overflowTimes && !overflowSum else { return nil }
            value = sum
            index += 1
        }
        if negative && value == 0 { return nil }
        return value
    }

    /// Whether a client name is one Redis accepts: no byte below `!` or above `~`.
    public static func isClientName(_ name: UnsafeRawBufferPointer) -> Bool {
        name.allSatisfy { $0 >= UInt8(ascii: "!") && $0 <= UInt8(ascii: "~") }
    }
}
