import Glibc
import ProfileProtocol

/// The protocol's rules for a profile's three values, checked before a row
/// leaves profilectl so a bad row never reaches the server and never fails a
/// whole MSET.
///
/// Stateless; any thread.
enum ProfileCheck {
    /// Why the values cannot be stored, or nil when they can.
    static func problem(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                        portraitUri: UnsafeRawBufferPointer) -> String? {
        if userId.isEmpty { return "userId is empty" }
        return problem("userId", userId, limit: Limits.userId)
            ?? problem("name", name, limit: Limits.name)
            ?? problem("portraitUri", portraitUri, limit: Limits.portraitUri)
    }

    private static func problem(_ field: String, _ value: UnsafeRawBufferPointer, limit: Int) -> String? {
        if value.count > limit {
            return "\(field) is \(value.count) bytes, over its limit of \(limit)"
        }
        guard let base = value.baseAddress, !value.isEmpty else { return nil }
        if memchr(base, 0, value.count) != nil {
            return "\(field) holds a NUL byte"
        }
        if !isValidUTF8(base, count: value.count) {
            return "\(field) is not valid UTF-8"
        }
        return nil
    }
}

/// Whether `count` bytes at `start` are well-formed UTF-8: no overlong forms,
/// no surrogates, nothing above U+10FFFF (Unicode's table 3-7).
func isValidUTF8(_ start: UnsafeRawPointer, count: Int) -> Bool {
    var i = 0
    while i < count {
        if i + 8 <= count && start.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
            i += 8
            continue
        }
        let lead = start.load(fromByteOffset: i, as: UInt8.self)
        if lead < 0x80 {
            i += 1
            continue
        }
        let trailing: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: trailing = 1
        case 0xE0: trailing = 2; low = 0xA0
        case 0xED: trailing = 2; high = 0x9F
        case 0xE1...0xEF: trailing = 2
        case 0xF0: trailing = 3; low = 0x90
        case 0xF4: trailing = 3; high = 0x8F
        case 0xF1...0xF3: trailing = 3
        default: return false
        }
        guard i + trailing < count else { return false }
        let second = start.load(fromByteOffset: i + 1, as: UInt8.self)
        guard second >= low && second <= high else { return false }
        var k = 2
        while k <= trailing {
            guard start.load(fromByteOffset: i + k, as: UInt8.self) & 0xC0 == 0x80 else { return false }
            k += 1
        }
        i += trailing + 1
    }
    return true
}
