/// Writes profiles as CSV records or JSON objects, the forms `import` reads.
///
/// Stateless; any thread.
enum RecordWriter {
    static let csvHeader: StaticString = "userId,name,portraitUri\n"

    /// One CSV record (RFC 4180, LF line end), quoting fields that need it.
    static func csv(_ userId: UnsafeRawBufferPointer, _ name: UnsafeRawBufferPointer,
                    _ portraitUri: UnsafeRawBufferPointer, to out: OutputFile) {
        csvField(userId, to: out)
        out.append(0x2C)
        csvField(name, to: out)
        out.append(0x2C)
        csvField(portraitUri, to: out)
        out.append(0x0A)
    }

    private static func csvField(_ value: UnsafeRawBufferPointer, to out: OutputFile) {
        guard value.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) else {
            out.append(value)
            return
        }
        out.append(0x22)
        for b in value {
            if b == 0x22 { out.append(0x22) }
            out.append(b)
        }
        out.append(0x22)
    }

    /// `{"userId":...,"name":...,"portraitUri":...}` and a LF.
    static func jsonLine(_ userId: UnsafeRawBufferPointer, _ name: UnsafeRawBufferPointer,
                         _ portraitUri: UnsafeRawBufferPointer, to out: OutputFile) {
        out.append("{\"userId\":")
        jsonString(userId, to: out)
        out.append(",\"name\":")
        jsonString(name, to: out)
        out.append(",\"portraitUri\":")
        jsonString(portraitUri, to: out)
        out.append("}\n")
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n` `\r`
    /// `\t` `\b` `\f` or `\u00XX`, everything else (UTF-8 included) as it is.
    static func jsonString(_ value: UnsafeRawBufferPointer, to out: OutputFile) {
        out.append(0x22)
        for b in value {
            switch b {
            case 0x22: out.append("\\\"")
            case 0x5C: out.append("\\\\")
            case 0x0A: out.append("\\n")
            case 0x0D: out.append("\\r")
            case 0x09: out.append("\\t")
            case 0x08: out.append("\\b")
            case 0x0C: out.append("\\f")
            case 0..<0x20:
                out.append("\\u00")
                out.append(hexDigit(b >> 4))
                out.append(hexDigit(b & 0xF))
            default: out.append(b)
            }
        }
        out.append(0x22)
    }

    /// A JSON string of UTF-8 bytes, as text.
    static func jsonString(_ value: [UInt8]) -> String {
        let out = OutputFile()
        value.withUnsafeBytes { jsonString($0, to: out) }
        return out.takeText()
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : 0x61 + nibble - 10
    }
}
