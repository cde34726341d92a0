/// Redis's `stringmatchlen`: `*`, `?`, `[...]` (with `^` and ranges) and `\` escapes.
public func globMatches(_ pattern: UnsafeRawBufferPointer, _ text: UnsafeRawBufferPointer, ignoringCase: Bool) -> Bool {
    func lower(_ b: UInt8) -> UInt8 { ignoringCase && b >= 0x41 && b <= 0x5A ? b | 0x20 : b }
    func match(_ p: Int, _ t: Int) -> Bool {
        var p = p, t = t
        while p < pattern.count {
            switch pattern[p] {
            case UInt8(ascii: "*"):
                while p + 1 < pattern.count && pattern[p + 1] == UInt8(ascii: "*") { p += 1 }
                if p + 1 == pattern.count { return true }
                while t <= text.count {
                    if match(p + 1, t) { return true }
                    t += 1
                }
                return false
            case UInt8(ascii: "?"):
                guard t < text.count else { return false }
                t += 1
            case UInt8(ascii: "["):
                guard t < text.count else { return false }
                p += 1
                let negate = p < pattern.count && pattern[p] == UInt8(ascii: "^")
                if negate { p += 1 }
                var matched = false
                while p < pattern.count && pattern[p] != UInt8(ascii: "]") {
                    if pattern[p] == UInt8(ascii: "\\") && p + 1 < pattern.count {
                        p += 1
                        if lower(pattern[p]) == lower(text[t]) { matched = true }
                    } else if p + 2 < pattern.count && pattern[p + 1] == UInt8(ascii: "-") {
                        var start = lower(pattern[p]), end = lower(pattern[p + 2])
                        if start > end { swap(&start, &end) }
                        if lower(text[t]) >= start && lower(text[t]) <= end { matched = true }
                        p += 2
                    } else if lower(pattern[p]) == lower(text[t]) {
                        matched = true
                    }
                    p += 1
                }
                if p == pattern.count { p -= 1 }  // an unclosed class ends the pattern
                if matched == negate { return false }
                t += 1
            case UInt8(ascii: "\\") where p + 1 < pattern.count:
                p += 1
                guard t < text.count, lower(pattern[p]) == lower(text[t]) else { return false }
                t += 1
            default:
                guard t < text.count, lower(pattern[p]) == lower(text[t]) else { return false }
                t += 1
            }
            p += 1
        }
        return t == text.count
    }
    return match(0, 0)
}
