import Glibc
import ProfileProtocol
import WireBytes

/// Reads JSON Lines: one object per line with the string fields `userId`,
/// `name` and `portraitUri`; other fields may hold any JSON value and are
/// ignored. Empty lines are skipped, a CR before the LF is dropped, and a
/// leading byte order mark is tolerated.
///
/// Threading: one thread at a time.
public final class JSONLinesParser: RowParser {
    private let buffer: ChunkBuffer
    private let object: JSONObjectReader
    private var line = 0
    private var checkedByteOrderMark = false
    public private(set) var values = RowValues(userId: .init(start: nil, count: 0), name: .init(start: nil, count: 0),
                                               portraitUri: .init(start: nil, count: 0))

    /// `chunkCapacity` is also the longest line accepted.
    public init(_ input: any ByteInput, chunkCapacity: Int = 1 << 18) {
        buffer = ChunkBuffer(input, capacity: chunkCapacity)
        object = JSONObjectReader(capacity: chunkCapacity)
    }

    public var bytesConsumed: Int { buffer.consumed }

    public func next() throws -> RowEvent {
        while true {
            guard let (start, count) = try nextLine() else { return .end }
            guard let start else {
                return .bad(line: line, reason: "the line is over \(buffer.capacity) bytes")
            }
            var text = UnsafeRawBufferPointer(start: start, count: count)
            if !checkedByteOrderMark {
                checkedByteOrderMark = true
                if text.starts(with: [0xEF, 0xBB, 0xBF]) { text = UnsafeRawBufferPointer(rebasing: text[3...]) }
            }
            if text.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            switch object.read(text) {
            case .failure(let problem):
                return .bad(line: line, reason: problem.reason)
            case .success(let row):
                if let problem = ProfileCheck.problem(userId: row.userId, name: row.name, portraitUri: row.portraitUri) {
                    return .bad(line: line, reason: problem)
                }
                values = row
                return .row(line: line)
            }
        }
    }

    /// The next line without its line break, as a view into the buffer; a nil
    /// start for a line longer than the buffer, which is skipped; nil at the end.
    private func nextLine() throws(InputError) -> (UnsafeRawPointer?, Int)? {
        var scanFrom = buffer.position
        while true {
            if let lf = memchr(buffer.base + scanFrom, 0x0A, buffer.end - scanFrom) {
                let lfOffset = UnsafeMutableRawPointer(lf) - buffer.base
                let start = buffer.position
                buffer.position = lfOffset + 1
                line += 1
                var count = lfOffset - start
                if count > 0 && buffer.base.load(fromByteOffset: lfOffset - 1, as: UInt8.self) == 0x0D { count -= 1 }
                return (UnsafeRawPointer(buffer.base + start), count)
            }
            if buffer.position == 0 && buffer.end == buffer.capacity {
                line += 1
                try skipPastLineBreak()
                return (nil, 0)
            }
            scanFrom = buffer.end - buffer.position
            var keep = buffer.position
            guard try buffer.refill(keepingFrom: &keep) else {
                guard buffer.position < buffer.end else { return nil }
                let start = buffer.position
                buffer.position = buffer.end
                line += 1
                var count = buffer.end - start
                if buffer.base.load(fromByteOffset: buffer.end - 1, as: UInt8.self) == 0x0D { count -= 1 }
                return (UnsafeRawPointer(buffer.base + start), count)
            }
        }
    }

    private func skipPastLineBreak() throws(InputError) {
        buffer.position = buffer.end
        while try buffer.refill() {
            if let lf = memchr(buffer.base + buffer.position, 0x0A, buffer.end - buffer.position) {
                buffer.position = UnsafeMutableRawPointer(lf) - buffer.base + 1
                return
            }
            buffer.position = buffer.end
        }
    }
}

/// Why a line is not an acceptable JSON object.
struct JSONProblem: Error {
    var reason: String
}

/// A strict JSON parser for one object per line (RFC 8259): strings with every
/// escape, `\u` surrogate pairs included, are unescaped into its own memory;
/// values of fields other than the three are checked and skipped.
///
/// Threading: one thread at a time.
final class JSONObjectReader {
    private static let maxDepth = 64
    private let out: UnsafeMutableRawPointer
    private var outCount = 0
    private var p = UnsafeRawPointer(bitPattern: 1)!
    private var count = 0
    private var i = 0

    init(capacity: Int) {
        // Unescaping never makes a string longer than its JSON text.
        out = .allocate(byteCount: max(capacity, 16), alignment: 16)
    }

    deinit { out.deallocate() }

    func read(_ text: UnsafeRawBufferPointer) -> Result<RowValues, JSONProblem> {
        guard let base = text.baseAddress else { return .failure(JSONProblem(reason: "bad JSON: empty line")) }
        p = base
        count = text.count
        i = 0
        outCount = 0
        guard isValidUTF8(base, count: count) else {
            return .failure(JSONProblem(reason: "the line is not valid UTF-8"))
        }
        do throws(JSONProblem) {
            return .success(try readObject())
        } catch {
            return .failure(error)
        }
    }

    private func fail(_ what: String) -> JSONProblem {
        JSONProblem(reason: "bad JSON: \(what) at column \(i + 1)")
    }

    @inline(__always)
    private func peek() -> UInt8? {
        i < count ? p.load(fromByteOffset: i, as: UInt8.self) : nil
    }

    private func skipSpace() {
        while let b = peek(), b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { i += 1 }
    }

    private func expect(_ byte: UInt8, _ what: String) throws(JSONProblem) {
        skipSpace()
        guard peek() == byte else { throw fail("expected \(what)") }
        i += 1
    }

    private func readObject() throws(JSONProblem) -> RowValues {
        let fieldNames: [[UInt8]] = [Array("userId".utf8), Array("name".utf8), Array("portraitUri".utf8)]
        var found: [Range<Int>?] = [nil, nil, nil]
        skipSpace()
        guard peek() == UInt8(ascii: "{") else { throw fail("expected an object") }
        i += 1
        skipSpace()
        if peek() == UInt8(ascii: "}") {
            i += 1
        } else {
            while true {
                skipSpace()
                guard peek() == UInt8(ascii: "\"") else { throw fail("expected a field name") }
                let keyStart = outCount
                try readString()
                let key = UnsafeRawBufferPointer(start: out + keyStart, count: outCount - keyStart)
                let known = fieldNames.firstIndex { key.elementsEqual($0) }
                outCount = keyStart
                try expect(UInt8(ascii: ":"), "':'")
                skipSpace()
                if let known {
                    let name = String(decoding: fieldNames[known], as: UTF8.self)
                    guard found[known] == nil else { throw JSONProblem(reason: "\(name) appears twice") }
                    guard peek() == UInt8(ascii: "\"") else { throw JSONProblem(reason: "\(name) is not a string") }
                    let start = outCount
                    try readString()
                    found[known] = start..<outCount
                } else {
                    try skipValue(depth: 1)
                }
                skipSpace()
                guard let b = peek(), b == UInt8(ascii: ",") || b == UInt8(ascii: "}") else {
                    throw fail("expected ',' or '}'")
                }
                i += 1
                if b == UInt8(ascii: "}") { break }
            }
        }
        skipSpace()
        guard i == count else { throw fail("text after the object") }
        for (index, range) in found.enumerated() where range == nil {
            throw JSONProblem(reason: "no \(String(decoding: fieldNames[index], as: UTF8.self)) field")
        }
        func view(_ range: Range<Int>?) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(start: out + range!.lowerBound, count: range!.count)
        }
        return RowValues(userId: view(found[0]), name: view(found[1]), portraitUri: view(found[2]))
    }

    @inline(__always)
    private func put(_ b: UInt8) {
        out.storeBytes(of: b, toByteOffset: outCount, as: UInt8.self)
        outCount += 1
    }

    /// Reads the string at `i` (its opening quote) and appends it unescaped.
    private func readString() throws(JSONProblem) {
        i += 1
        while true {
            let runStart = i
            while i < count {
                let b = p.load(fromByteOffset: i, as: UInt8.self)
                if b == 0x22 || b == 0x5C || b < 0x20 { break }
                i += 1
            }
            if i > runStart {
                (out + outCount).copyMemory(from: p + runStart, byteCount: i - runStart)
                outCount += i - runStart
            }
            guard let b = peek() else { throw fail("unterminated string") }
            if b == 0x22 {
                i += 1
                return
            }
            if b < 0x20 { throw fail("control character in a string") }
            i += 1
            guard let escaped = peek() else { throw fail("unterminated string") }
            i += 1
            switch escaped {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): put(escaped)
            case UInt8(ascii: "b"): put(0x08)
            case UInt8(ascii: "f"): put(0x0C)
            case UInt8(ascii: "n"): put(0x0A)
            case UInt8(ascii: "r"): put(0x0D)
            case UInt8(ascii: "t"): put(0x09)
            case UInt8(ascii: "u"): try readUnicodeEscape()
            default:
                i -= 2
                throw fail("bad escape")
            }
        }
    }

    /// After `\u`: four hex digits, and for a high surrogate the `\uXXXX` of
    /// its low half; appends the scalar as UTF-8.
    private func readUnicodeEscape() throws(JSONProblem) {
        var scalar = try hex4()
        if scalar >= 0xD800 && scalar <= 0xDBFF {
            guard i + 1 < count, p.load(fromByteOffset: i, as: UInt8.self) == 0x5C,
                  p.load(fromByteOffset: i + 1, as: UInt8.self) == UInt8(ascii: "u") else {
                throw fail("a lone surrogate")
            }
            i += 2
            let low = try hex4()
            guard low >= 0xDC00 && low <= 0xDFFF else { throw fail("a lone surrogate") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
            throw fail("a lone surrogate")
        }
        switch scalar {
        case 0..<0x80:
            put(UInt8(scalar))
        case 0x80..<0x800:
            put(UInt8(0xC0 | (scalar >> 6)))
            put(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            put(UInt8(0xE0 | (scalar >> 12)))
            put(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            put(UInt8(0x80 | (scalar & 0x3F)))
        default:
            put(UInt8(0xF0 | (scalar >> 18)))
            put(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            put(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            put(UInt8(0x80 | (scalar & 0x3F)))
        }
    }

    private func hex4() throws(JSONProblem) -> UInt32 {
        guard i + 4 <= count else { throw fail("bad \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let b = p.load(fromByteOffset: i, as: UInt8.self)
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw fail("bad \\u escape")
            }
            value = value << 4 | UInt32(digit)
            i += 1
        }
        return value
    }

    /// Checks and passes over any JSON value.
    private func skipValue(depth: Int) throws(JSONProblem) {
        guard depth <= Self.maxDepth else { throw fail("nesting too deep") }
        skipSpace()
        guard let b = peek() else { throw fail("expected a value") }
        switch b {
        case UInt8(ascii: "\""):
            let mark = outCount
            try readString()
            outCount = mark
        case UInt8(ascii: "{"):
            i += 1
            skipSpace()
            if peek() == UInt8(ascii: "}") { i += 1; return }
            while true {
                skipSpace()
                guard peek() == UInt8(ascii: "\"") else { throw fail("expected a field name") }
                let mark = outCount
                try readString()
                outCount = mark
                try expect(UInt8(ascii: ":"), "':'")
                try skipValue(depth: depth + 1)
                skipSpace()
                guard let c = peek(), c == UInt8(ascii: ",") || c == UInt8(ascii: "}") else {
                    throw fail("expected ',' or '}'")
                }
                i += 1
                if c == UInt8(ascii: "}") { return }
            }
        case UInt8(ascii: "["):
            i += 1
            skipSpace()
            if peek() == UInt8(ascii: "]") { i += 1; return }
            while true {
                try skipValue(depth: depth + 1)
                skipSpace()
                guard let c = peek(), c == UInt8(ascii: ",") || c == UInt8(ascii: "]") else {
                    throw fail("expected ',' or ']'")
                }
                i += 1
                if c == UInt8(ascii: "]") { return }
            }
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: try skipNumber()
        }
    }

    private func literal(_ word: StaticString) throws(JSONProblem) {
        let n = word.utf8CodeUnitCount
        guard i + n <= count, memcmp(p + i, word.utf8Start, n) == 0 else { throw fail("bad value") }
        i += n
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private func skipNumber() throws(JSONProblem) {
        func isDigit(_ b: UInt8?) -> Bool { b.map { $0 >= 0x30 && $0 <= 0x39 } ?? false }
        func digits() throws(JSONProblem) {
            guard isDigit(peek()) else { throw fail("bad number") }
            while isDigit(peek()) { i += 1 }
        }
        if peek() == UInt8(ascii: "-") { i += 1 }
        guard isDigit(peek()) else { throw fail("bad value") }
        if peek() == UInt8(ascii: "0") { i += 1 } else { try digits() }
        if peek() == UInt8(ascii: ".") {
            i += 1
            try digits()
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            i += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { i += 1 }
            try digits()
        }
    }
}
