/// Whether `count` bytes at `start` are well-formed UTF-8: no overlong forms, no
/// surrogates, nothing above U+10FFFF (Unicode's table 3-7). NUL is checked elsewhere.
///
/// Runs of ASCII are skipped eight bytes at a time. Both wire formats check values with it,
/// and the admin tools check import rows by the same rule before they reach a server.
public func isValidUTF8(_ start: UnsafeRawPointer, count: Int) -> Bool {
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
        // The second byte's range depends on the lead; later ones are always 80...BF.
        let trailing: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: trailing = 1
        case 0xE0: trailing = 2; low = 0xA0        // overlong below
        case 0xED: trailing = 2; high = 0x9F       // surrogates above
        case 0xE1...0xEF: trailing = 2
        case 0xF0: trailing = 3; low = 0x90        // overlong below
        case 0xF4: trailing = 3; high = 0x8F       // beyond U+10FFFF above
        case 0xF1...0xF3: trailing = 3
        default: return false                      // continuation byte, C0, C1, F5...FF
        }
        guard i + trailing < count else {
            return false
        }
        let second = start.load(fromByteOffset: i + 1, as: UInt8.self)
        guard second >= low && second <= high else {
            return false
        }
        var k = 2
        while k <= trailing {
            guard start.load(fromByteOffset: i + k, as: UInt8.self) & 0xC0 == 0x80 else {
                return false
            }
            k += 1
        }
        i += trailing + 1
    }
    return true
}
