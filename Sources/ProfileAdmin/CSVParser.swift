import Glibc

/// Reads CSV as RFC 4180 describes it: a header row naming `userId`, `name`
/// and `portraitUri` in any order (other columns are ignored), fields quoted
/// with `"` when they hold commas, quotes (doubled) or line breaks, LF or CRLF
/// line ends, UTF-8 with an optional byte order mark. Empty lines are skipped.
///
/// A row's line is the physical line it starts on. After a broken row the
/// parser resumes at the next line break.
///
/// Threading: one thread at a time.
public final class CSVParser: RowParser {
    /// The longest row kept; a longer one is a bad row (three valid values
    /// take at most 2,434 bytes, so only other columns can get near it).
    public static let maxRowBytes = 1 << 16
    /// Columns whose positions are kept; a row with more is still counted.
    static let maxFields = 64

    private enum State {
        case fieldStart, unquoted, quoted, afterQuote, afterQuoteCR
    }

    private struct Header {
        var userId: Int
        var name: Int
        var portraitUri: Int
        var names: [[UInt8]]
    }

    private let buffer: ChunkBuffer
    private let record: UnsafeMutableRawPointer
    private var recordCount = 0
    private var overflow = false
    /// End offsets in `record` of the row's first `maxFields` fields.
    private var fieldEnds: [Int] = []
    private var fieldCount = 0
    private var lastFieldQuoted = false
    private var line = 1
    private var header: Header?
    private var checkedByteOrderMark = false
    public private(set) var values = RowValues(userId: .init(start: nil, count: 0), name: .init(start: nil, count: 0),
                                               portraitUri: .init(start: nil, count: 0))

    public init(_ input: any ByteInput, chunkCapacity: Int = 1 << 18) {
        buffer = ChunkBuffer(input, capacity: chunkCapacity)
        record = .allocate(byteCount: Self.maxRowBytes, alignment: 16)
        fieldEnds.reserveCapacity(Self.maxFields)
    }

    deinit { record.deallocate() }

    public var bytesConsumed: Int { buffer.consumed }

    public func next() throws -> RowEvent {
        if !checkedByteOrderMark {
            try skipByteOrderMark()
        }
        while true {
            guard let (startLine, failure) = try readRecord() else { return .end }
            if let failure {
                return .bad(line: startLine, reason: failure)
            }
            if fieldCount == 1 && fieldEnds[0] == 0 && !lastFieldQuoted {
                continue
            }
            guard let header else {
                try readHeader(line: startLine)
                continue
            }
            return check(header, line: startLine)
        }
    }

    private func skipByteOrderMark() throws(InputError) {
        checkedByteOrderMark = true
        var keep = buffer.position
        while buffer.end - buffer.position < 3 {
            guard try buffer.refill(keepingFrom: &keep) else { break }
        }
        let p = buffer.base + buffer.position
        if buffer.end - buffer.position >= 3 && p.load(as: UInt8.self) == 0xEF
            && p.load(fromByteOffset: 1, as: UInt8.self) == 0xBB && p.load(fromByteOffset: 2, as: UInt8.self) == 0xBF {
            buffer.position += 3
        }
    }

    private func field(_ index: Int) -> UnsafeRawBufferPointer {
        let start = index == 0 ? 0 : fieldEnds[index - 1]
        return UnsafeRawBufferPointer(start: record + start, count: fieldEnds[index] - start)
    }

    private func readHeader(line: Int) throws(FormatError) {
        if overflow || fieldCount > Self.maxFields {
            throw FormatError(line: line, reason: "the header row is too long")
        }
        var names: [[UInt8]] = []
        for i in 0..<fieldCount {
            let name = Array(field(i))
            if names.contains(name) {
                throw FormatError(line: line, reason: "the header names '\(String(decoding: name, as: UTF8.self))' twice")
            }
            names.append(name)
        }
        func column(_ name: String) throws(FormatError) -> Int {
            guard let index = names.firstIndex(of: Array(name.utf8)) else {
                throw FormatError(line: line, reason: "the header has no \(name) column")
            }
            return index
        }
        header = Header(userId: try column("userId"), name: try column("name"),
                        portraitUri: try column("portraitUri"), names: names)
    }

    private func check(_ header: Header, line: Int) -> RowEvent {
        if overflow {
            return .bad(line: line, reason: "the row is over \(Self.maxRowBytes) bytes")
        }
        if fieldCount != header.names.count {
            let kind = fieldCount < header.names.count ? "missing field" : "extra field"
            return .bad(line: line, reason: "\(kind): \(fieldCount) fields where the header has \(header.names.count)")
        }
        if (0..<fieldCount).allSatisfy({ field($0).elementsEqual(header.names[$0]) }) {
            return .bad(line: line, reason: "the header row again")
        }
        let row = RowValues(userId: field(header.userId), name: field(header.name),
                            portraitUri: field(header.portraitUri))
        if let problem = ProfileCheck.problem(userId: row.userId, name: row.name, portraitUri: row.portraitUri) {
            return .bad(line: line, reason: problem)
        }
        values = row
        return .row(line: line)
    }

    @inline(__always)
    private func append(_ source: UnsafeRawPointer, _ count: Int) {
        guard count > 0 else { return }
        if recordCount + count > Self.maxRowBytes {
            overflow = true
            return
        }
        (record + recordCount).copyMemory(from: source, byteCount: count)
        recordCount += count
    }

    /// Ends a field; a CR before the line break that ends an unquoted field
    /// belongs to the line break.
    @inline(__always)
    private func endField(quoted: Bool, atLineEnd: Bool) {
        if atLineEnd && !quoted && recordCount > 0 && !overflow
            && record.load(fromByteOffset: recordCount - 1, as: UInt8.self) == 0x0D {
            let start = fieldEnds.last ?? 0
            if fieldCount == fieldEnds.count && recordCount > start { recordCount -= 1 }
        }
        if fieldEnds.count < Self.maxFields { fieldEnds.append(recordCount) }
        fieldCount += 1
        lastFieldQuoted = quoted
    }

    /// Reads one record into `record` and `fieldEnds`.
    ///
    /// - Returns: nil at the end of input; else the record's first line and,
    ///   for a broken record, why (the rest of its line is then skipped).
    private func readRecord() throws(InputError) -> (Int, String?)? {
        recordCount = 0
        overflow = false
        fieldEnds.removeAll(keepingCapacity: true)
        fieldCount = 0
        let startLine = line
        var state = State.fieldStart
        var started = false
        var quoted = false
        while true {
            if buffer.position == buffer.end {
                guard try buffer.refill() else {
                    switch state {
                    case .fieldStart:
                        if !started { return nil }
                        endField(quoted: false, atLineEnd: true)
                    case .unquoted, .afterQuote, .afterQuoteCR:
                        endField(quoted: quoted, atLineEnd: true)
                    case .quoted:
                        return (startLine, "a quoted field is not closed before the end of the file")
                    }
                    return (startLine, nil)
                }
            }
            started = true
            let p = buffer.base
            var i = buffer.position
            let end = buffer.end
            switch state {
            case .fieldStart:
                switch p.load(fromByteOffset: i, as: UInt8.self) {
                case 0x22:
                    state = .quoted
                    quoted = true
                    i += 1
                case 0x2C:
                    endField(quoted: false, atLineEnd: false)
                    i += 1
                case 0x0A:
                    endField(quoted: false, atLineEnd: true)
                    line += 1
                    buffer.position = i + 1
                    return (startLine, nil)
                default:
                    state = .unquoted
                    quoted = false
                }
            case .unquoted:
                var j = i
                var b: UInt8 = 0
                while j < end {
                    b = p.load(fromByteOffset: j, as: UInt8.self)
                    if b == 0x2C || b == 0x0A || b == 0x22 { break }
                    j += 1
                }
                append(p + i, j - i)
                i = j
                if j < end {
                    i += 1
                    if b == 0x2C {
                        endField(quoted: false, atLineEnd: false)
                        state = .fieldStart
                    } else if b == 0x0A {
                        endField(quoted: false, atLineEnd: true)
                        line += 1
                        buffer.position = i
                        return (startLine, nil)
                    } else {
                        buffer.position = i
                        return (startLine, try skipLine(because: "a quote inside an unquoted field"))
                    }
                }
            case .quoted:
                var j = i
                while j < end {
                    let b = p.load(fromByteOffset: j, as: UInt8.self)
                    if b == 0x22 { break }
                    if b == 0x0A { line += 1 }
                    j += 1
                }
                append(p + i, j - i)
                i = j
                if j < end {
                    i += 1
                    state = .afterQuote
                }
            case .afterQuote:
                let b = p.load(fromByteOffset: i, as: UInt8.self)
                i += 1
                switch b {
                case 0x22:
                    append(p + i - 1, 1)
                    state = .quoted
                case 0x2C:
                    endField(quoted: true, atLineEnd: false)
                    state = .fieldStart
                case 0x0A:
                    endField(quoted: true, atLineEnd: true)
                    line += 1
                    buffer.position = i
                    return (startLine, nil)
                case 0x0D:
                    state = .afterQuoteCR
                default:
                    buffer.position = i - 1
                    return (startLine, try skipLine(because: "text after a closing quote"))
                }
            case .afterQuoteCR:
                guard p.load(fromByteOffset: i, as: UInt8.self) == 0x0A else {
                    buffer.position = i
                    return (startLine, try skipLine(because: "text after a closing quote"))
                }
                endField(quoted: true, atLineEnd: true)
                line += 1
                buffer.position = i + 1
                return (startLine, nil)
            }
            buffer.position = i
        }
    }

    /// Drops input through the next line break; returns `reason`.
    private func skipLine(because reason: String) throws(InputError) -> String {
        while true {
            if buffer.position == buffer.end {
                guard try buffer.refill() else { return reason }
            }
            let rest = buffer.end - buffer.position
            if let lf = memchr(buffer.base + buffer.position, 0x0A, rest) {
                buffer.position = UnsafeMutableRawPointer(lf) - buffer.base + 1
                line += 1
                return reason
            }
            buffer.position = buffer.end
        }
    }
}
