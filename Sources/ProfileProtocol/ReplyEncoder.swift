import WireBytes
/// Writes whole reply lines into caller memory, each with an exact-size companion so
/// the caller can reserve room first. Nothing here allocates.
///
/// Error replies are written by `ProtocolError.write(to:)`.
///
/// Stateless; any thread may use it.
public enum ReplyEncoder {
    // Fixed replies, LF included; copy them with `write(_:to:)`. Inlinable, so that the
    // server's copy of one is a few stores.
    @inlinable public static var pong: StaticString { "PONG\n" }
    @inlinable public static var stored: StaticString { "STORED\n" }
    @inlinable public static var updated: StaticString { "UPDATED\n" }
    @inlinable public static var deleted: StaticString { "DELETED\n" }
    @inlinable public static var yes: StaticString { "YES\n" }
    @inlinable public static var no: StaticString { "NO\n" }
    @inlinable public static var ok: StaticString { "OK\n" }
    @inlinable public static var bye: StaticString { "BYE\n" }
    /// Closes the lists of MGET, RECENT, SCAN and STATS.
    @inlinable public static var end: StaticString { "END\n" }

    /// Copies a fixed reply to `out`; returns its length.
    @inlinable
    public static func write(_ reply: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        copyBytes(reply, to: out)
    }

    /// Bytes in `VALUE <userId> <name> <portraitUri>\n`.
    public static func valueLineCount(
        userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer
    ) -> Int {
        6 + ValueEncoder.encodedCount(userId) + 1 + ValueEncoder.encodedCount(name)
            + 1 + ValueEncoder.encodedCount(portraitUri) + 1
    }

    /// At least `valueLineCount`, from the values' lengths alone: every byte encodes to at most
    /// `ValueEncoder.maxExpansion` bytes, plus two quotes per value. Cheaper than the exact
    /// count, which reads every byte once more before `writeValueLine` reads them again.
    public static func valueLineBound(
        userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer
    ) -> Int {
        6 + 1 + 1 + 1 + 3 * 2 + ValueEncoder.maxExpansion * (userId.count + name.count + portraitUri.count)
    }

    /// Writes `VALUE <userId> <name> <portraitUri>\n` at `out`, which must have room
    /// for `valueLineCount` bytes; returns the bytes written.
    public static func writeValueLine(
        userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer,
        to out: UnsafeMutableRawPointer
    ) -> Int {
        var n = copyBytes("VALUE ", to: out)
        n += ValueEncoder.write(userId, to: out + n)
        n += copyBytes(" ", to: out + n)
        n += ValueEncoder.write(name, to: out + n)
        n += copyBytes(" ", to: out + n)
        n += ValueEncoder.write(portraitUri, to: out + n)
        n += copyBytes("\n", to: out + n)
        return n
    }

    /// Where a VALUE line carries its values byte for byte: each one's offset from the line's
    /// start, or nil for a value the line had to escape.
    ///
    /// A plain value; any thread may use it.
    public struct ValueLineLayout: Equatable, Sendable {
        public var count: Int
        public var userId: Int?
        public var name: Int?
        public var portraitUri: Int?
    }

    /// `writeValueLine`, also telling where the line carries each value as it is, so that a
    /// cache can keep the one line and find the values in it.
    public static func writeValueLineLocatingValues(
        userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer,
        to out: UnsafeMutableRawPointer
    ) -> ValueLineLayout {
        var n = copyBytes("VALUE ", to: out)
        // A token as long as its value is the value; two longer, the value in plain quotes.
        func token(_ value: UnsafeRawBufferPointer) -> Int? {
            let start = n
            n += ValueEncoder.write(value, to: out + n)
            switch n - start - value.count {
            case 0: return start
            case 2: return start + 1
            default: return nil
            }
        }
        let userIdAt = token(userId)
        n += copyBytes(" ", to: out + n)
        let nameAt = token(name)
        n += copyBytes(" ", to: out + n)
        let portraitUriAt = token(portraitUri)
        n += copyBytes("\n", to: out + n)
        return ValueLineLayout(count: n, userId: userIdAt, name: nameAt, portraitUri: portraitUriAt)
    }

    /// Bytes in `NOTFOUND <userId>\n`.
    public static func notFoundLineCount(userId: UnsafeRawBufferPointer) -> Int {
        9 + ValueEncoder.encodedCount(userId) + 1
    }

    /// Writes `NOTFOUND <userId>\n` at `out`, which must have room for
    /// `notFoundLineCount` bytes; returns the bytes written.
    public static func writeNotFoundLine(userId: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
        var n = copyBytes("NOTFOUND ", to: out)
        n += ValueEncoder.write(userId, to: out + n)
        n += copyBytes("\n", to: out + n)
        return n
    }

    /// Bytes in `<keyword> <value>\n`, as in `STORED 5` and `COUNT 42`.
    public static func numberLineCount(_ keyword: StaticString, _ value: UInt64) -> Int {
        keyword.utf8CodeUnitCount + 1 + decimalCount(value) + 1
    }

    /// Writes `<keyword> <value>\n` at `out` (`STORED <n>`, `COUNT <n>`), which must
    /// have room for `numberLineCount` bytes; returns the bytes written.
    public static func writeNumberLine(_ keyword: StaticString, _ value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
        var n = copyBytes(keyword, to: out)
        n += copyBytes(" ", to: out + n)
        n += writeDecimal(value, to: out + n)
        n += copyBytes("\n", to: out + n)
        return n
    }

    /// Bytes in `STAT <name> <value>\n`.
    public static func statLineCount(name: StaticString, value: UInt64) -> Int {
        5 + name.utf8CodeUnitCount + 1 + decimalCount(value) + 1
    }

    /// Writes `STAT <name> <value>\n` at `out`, which must have room for
    /// `statLineCount` bytes; returns the bytes written. `name` must be a bare token.
    public static func writeStatLine(name: StaticString, value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
        var n = copyBytes("STAT ", to: out)
        n += copyBytes(name, to: out + n)
        n += copyBytes(" ", to: out + n)
        n += writeDecimal(value, to: out + n)
        n += copyBytes("\n", to: out + n)
        return n
    }

    /// Bytes in `STAT <name> <text>\n`.
    public static func statLineCount(name: StaticString, text: StaticString) -> Int {
        5 + name.utf8CodeUnitCount + 1 + text.utf8CodeUnitCount + 1
    }

    /// Writes `STAT <name> <text>\n` at `out`, which must have room for `statLineCount`
    /// bytes; returns the bytes written. `name` and `text` must be bare tokens.
    public static func writeStatLine(name: StaticString, text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        var n = copyBytes("STAT ", to: out)
        n += copyBytes(name, to: out + n)
        n += copyBytes(" ", to: out + n)
        n += copyBytes(text, to: out + n)
        n += copyBytes("\n", to: out + n)
        return n
    }
}
