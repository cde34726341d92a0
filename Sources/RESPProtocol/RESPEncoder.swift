import WireBytes
/// The RESP version a connection speaks: RESP2 from the start, RESP3 after `HELLO 3`.
///
/// A plain value; any thread may use it.
public enum RESPVersion: UInt8, Sendable {
    case resp2 = 2
    case resp3 = 3
}

/// Writes RESP replies into caller memory, each with an exact-size companion so the caller
/// can reserve room first. Nothing here allocates.
///
/// Fixed replies are `StaticString`s: reserve their `utf8CodeUnitCount` and copy them with
/// `write(_:to:)`. Protocol errors are written by `RESPProtocolError.write(to:)`, command
/// errors by the functions in RESPEncoder+CommandErrors.swift.
///
/// Stateless; any thread may use it.
public enum RESPEncoder {
    /// The null bulk string: `$-1` in RESP2, `_` in RESP3.
    public static func nullBulkString(_ version: RESPVersion) -> StaticString {
        version == .resp3 ? "_\r\n" : "$-1\r\n"
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    public static func nullArray(_ version: RESPVersion) -> StaticString {
        version == .resp3 ? "_\r\n" : "*-1\r\n"
    }

    /// Copies a fixed reply to `out`; returns its length.
    public static func write(_ reply: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        copyBytes(reply, to: out)
    }

    /// Bytes in the simple string `+<text>\r\n`.
    public static func simpleStringCount(_ text: StaticString) -> Int {
        text.utf8CodeUnitCount + 3
    }

    /// Writes `+<text>\r\n` at `out`, which must have room for `simpleStringCount` bytes;
    /// returns the bytes written. `text` must hold no CR or LF, as in `OK` or `QUEUED`.
    public static func writeSimpleString(_ text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        out.storeBytes(of: UInt8(ascii: "+"), as: UInt8.self)
        var n = 1 + copyBytes(text, to: out + 1)
        n += copyBytes("\r\n", to: out + n)
        return n
    }

    /// Bytes in the error `-<text>\r\n`.
    public static func errorCount(_ text: StaticString) -> Int {
        text.utf8CodeUnitCount + 3
    }

    /// Writes the error `-<text>\r\n` at `out`, which must have room for `errorCount` bytes;
    /// returns the bytes written. `text` starts with the error code and holds no CR or LF,
    /// as in `ERR syntax error` or `NOAUTH Authentication required.`.
    public static func writeError(_ text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        out.storeBytes(of: UInt8(ascii: "-"), as: UInt8.self)
        var n = 1 + copyBytes(text, to: out + 1)
        n += copyBytes("\r\n", to: out + n)
        return n
    }

    /// Bytes in the error `-<text>\r\n` for `text` made at run time.
    public static func errorCount(_ text: UnsafeRawBufferPointer) -> Int {
        text.count + 3
    }

    /// Writes the error `-<text>\r\n` at `out`, which must have room for `errorCount` bytes;
    /// returns the bytes written. Each CR or LF in `text` is written as a space, as Redis
    /// does for texts that quote a client, so the reply stays one line.
    public static func writeError(_ text: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
        var reply = ReplyBuilder(out)
        reply.put(UInt8(ascii: "-"))
        reply.putOneLine(text)
        reply.put("\r\n")
        return reply.count
    }

    /// Bytes in the integer `:<value>\r\n`.
    public static func integerCount(_ value: Int64) -> Int {
        decimalCount(value) + 3
    }

    /// Writes `:<value>\r\n` at `out`, which must have room for `integerCount` bytes;
    /// returns the bytes written.
    public static func writeInteger(_ value: Int64, to out: UnsafeMutableRawPointer) -> Int {
        out.storeBytes(of: UInt8(ascii: ":"), as: UInt8.self)
        var n = 1 + writeDecimal(value, to: out + 1)
        n += copyBytes("\r\n", to: out + n)
        return n
    }

    /// Bytes in the bulk string `$<length>\r\n<bytes>\r\n` of `length` bytes.
    @inlinable
    public static func bulkStringCount(length: Int) -> Int {
        1 + decimalCount(UInt64(length)) + 2 + length + 2
    }

    /// Writes `value` as the bulk string `$<length>\r\n<value>\r\n` at `out`, which must have
    /// room for `bulkStringCount(length: value.count)` bytes; returns the bytes written.
    /// Inlined: it writes most of a cached HGETALL's reply, where the calls for its header and
    /// its value cost about 60 of the request's 1,590 instructions.
    @inlinable @inline(__always)
    public static func writeBulkString(_ value: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
        var n = writeHeader(UInt8(ascii: "$"), UInt64(value.count), to: out)
        n += copyBytes(value, to: out + n)
        n += copyBytes("\r\n", to: out + n)
        return n
    }

    /// Writes `text` as a bulk string at `out`, which must have room for
    /// `bulkStringCount(length: text.utf8CodeUnitCount)` bytes; returns the bytes written.
    public static func writeBulkString(_ text: StaticString, to out: UnsafeMutableRawPointer) -> Int {
        writeBulkString(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount), to: out)
    }

    /// Bytes in the array header `*<count>\r\n`.
    public static func arrayHeaderCount(_ count: Int) -> Int {
        decimalCount(UInt64(count)) + 3
    }

    /// Writes the header `*<count>\r\n` of an array of `count` elements, which the caller
    /// writes next; `out` must have room for `arrayHeaderCount` bytes. Returns the bytes written.
    public static func writeArrayHeader(_ count: Int, to out: UnsafeMutableRawPointer) -> Int {
        writeHeader(UInt8(ascii: "*"), UInt64(count), to: out)
    }

    /// Bytes in the header of a map of `pairs` pairs.
    public static func mapHeaderCount(_ pairs: Int, _ version: RESPVersion) -> Int {
        version == .resp3 ? decimalCount(UInt64(pairs)) + 3 : arrayHeaderCount(2 * pairs)
    }

    /// Writes the header of a map of `pairs` pairs, whose keys and values the caller writes
    /// next, alternately: `%<pairs>\r\n` in RESP3, and in RESP2, which has no maps, the flat
    /// array `*<2 * pairs>\r\n`, as Redis answers HGETALL. `out` must have room for
    /// `mapHeaderCount` bytes. Returns the bytes written.
    public static func writeMapHeader(_ pairs: Int, _ version: RESPVersion, to out: UnsafeMutableRawPointer) -> Int {
        version == .resp3
            ? writeHeader(UInt8(ascii: "%"), UInt64(pairs), to: out)
            : writeArrayHeader(2 * pairs, to: out)
    }

    /// Writes `<type><value>\r\n`.
    @inlinable @inline(__always)
    static func writeHeader(_ type: UInt8, _ value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
        out.storeBytes(of: type, as: UInt8.self)
        var n = 1 + writeDecimal(value, to: out + 1)
        n += copyBytes("\r\n", to: out + n)
        return n
    }
}
