import Glibc

/// PostgreSQL array literals in the text format, to pass many values as one parameter
/// (`WHERE user_id = ANY($1::text[])`, `unnest($1::text[], $2::text[])`).
///
/// Threading: stateless; any thread.
public enum PostgresArray {
    /// `{"a","b\"c"}`: every element quoted, so that none reads as NULL and spaces, commas and
    /// braces stay in it; `"` and `\` escaped with a backslash. Elements are bytes, passed
    /// through as they are (PostgreSQL checks they are valid in the database's encoding).
    ///
    /// Built in one allocation, and an element with nothing to escape (nearly every one) is
    /// found so by `memchr` and copied whole: the literals of a group commit's ids and values
    /// are built on every SET.
    ///
    /// - Parameter elements: any collections of bytes: `UnsafeRawBufferPointer`s, `[UInt8]`s,
    ///   a string's `utf8`.
    /// - Returns: the literal, for a `$n::text[]` parameter.
    @inlinable
    public static func textLiteral<Elements: Collection>(_ elements: Elements) -> [UInt8]
    where Elements.Element: Collection, Elements.Element.Element == UInt8 {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        // Room for every byte escaped: the literal lives only as long as its statement.
        var capacity = 2
        for element in elements { capacity += 2 * element.count + 3 }
        return [UInt8](unsafeUninitializedCapacity: capacity) { literal, count in
            var at = 0
            func put(_ byte: UInt8) {
                literal[at] = byte
                at += 1
            }
            put(UInt8(ascii: "{"))
            for element in elements {
                if at > 1 { put(UInt8(ascii: ",")) }
                put(quote)
                let copied = element.withContiguousStorageIfAvailable { bytes -> Bool in
                    guard let base = bytes.baseAddress, !bytes.isEmpty else { return true }
                    guard memchr(base, Int32(quote), bytes.count) == nil, memchr(base, Int32(backslash), bytes.count) == nil else {
                        return false
                    }
                    (literal.baseAddress! + at).initialize(from: base, count: bytes.count)
                    at += bytes.count
                    return true
                }
                if copied != true {
                    for byte in element {
                        if byte == quote || byte == backslash { put(backslash) }
                        put(byte)
                    }
                }
                put(quote)
            }
            put(UInt8(ascii: "}"))
            count = at
        }
    }
}
