import ProfileModel
import WireBytes

// A profile as a hash: HGETALL's reply, the RESP front's most common one, written in one call
// with its fixed parts as constants.

extension RESPEncoder {
    /// Bytes in the HGETALL reply of `values` (nil: no profile, an empty map).
    @inlinable
    public static func profileHashCount(_ values: ProfileValues?, _ version: RESPVersion) -> Int {
        guard let values else { return 4 }
        var count = 4
        if values.name.count > 0 { count += 10 + bulkStringCount(length: values.name.count) }
        if values.portraitUri.count > 0 { count += 18 + bulkStringCount(length: values.portraitUri.count) }
        return count
    }

    /// Writes the HGETALL reply of `values` (nil: no profile) at `out`, which must have room
    /// for `profileHashCount` bytes: a map (RESP3) or a flat array (RESP2) of the fields a
    /// profile has, name first. Returns the bytes written.
    @inlinable
    public static func writeProfileHash(_ values: ProfileValues?, _ version: RESPVersion,
                                        to out: UnsafeMutableRawPointer) -> Int {
        let fields = values?.fieldCount ?? 0
        // `%<pairs>\r\n` or `*<2 pairs>\r\n`: one digit either way.
        out.storeBytes(of: version == .resp3 ? UInt8(ascii: "%") : UInt8(ascii: "*"), as: UInt8.self)
        out.storeBytes(of: UInt8(ascii: "0") &+ UInt8(version == .resp3 ? fields : 2 * fields), toByteOffset: 1, as: UInt8.self)
        var n = 2 + copyBytes("\r\n", to: out + 2)
        guard let values else { return n }
        if values.name.count > 0 {
            n += copyBytes("$4\r\nname\r\n", to: out + n)
            n += writeBulkString(values.name, to: out + n)
        }
        if values.portraitUri.count > 0 {
            n += copyBytes("$11\r\nportraitUri\r\n", to: out + n)
            n += writeBulkString(values.portraitUri, to: out + n)
        }
        return n
    }
}
