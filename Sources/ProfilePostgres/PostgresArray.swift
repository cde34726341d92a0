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
    /// copied whole: the literals of a group commit's ids and values are built on every SET.
    ///
    /// - Parameter elements: any collections of bytes: `UnsafeRawBufferPointer`s, `[UInt8]`s,
    ///   a string's `utf8`.
    /// - Returns: the literal, for a `$n::text[]` parameter.
    @inlinable
    public static func textLiteral<Elements: Collection>(_ elements: Elements) -> [UInt8]
    where Elements.Element: Collection, Elements.Element.Element == UInt8 {
        var capacity = 2
        for element in elements { capacity += element.count + 3 }
        var literal: [UInt8] = []
        literal.reserveCapacity(capacity)
        literal.append(UInt8(ascii: "{"))
        for element in elements {
            if literal.count > 1 { literal.append(UInt8(ascii: ",")) }
            literal.append(UInt8(ascii: "\""))
            let plain = element.withContiguousStorageIfAvailable { bytes in
                !bytes.contains { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
            }
            if plain == true {
                literal.append(contentsOf: element)
            } else {
                for byte in element {
                    if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { literal.append(UInt8(ascii: "\\")) }
                    literal.append(byte)
                }
            }
            literal.append(UInt8(ascii: "\""))
        }
        literal.append(UInt8(ascii: "}"))
        return literal
    }
}
