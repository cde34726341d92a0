import Glibc
import ProfileProtocol
import WireBytes

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
