/// What a parser found next.
///
/// Threading: a plain value; any thread.
public enum RowEvent: Equatable, Sendable {
    /// A good row starting at this physical line; its values are in the
    /// parser's `row` until the next call.
    case row(line: Int)
    /// A row that cannot be imported, starting at this line, and why.
    case bad(line: Int, reason: String)
    /// The input is exhausted.
    case end
}

/// A file that cannot be imported at all (a bad CSV header), at this line.
///
/// Threading: a plain value; any thread.
public struct FormatError: Error, Equatable, Sendable {
    public var line: Int
    public var reason: String

    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }
}

/// The values of the last good row, as views into the parser's memory.
///
/// Threading: the parser's thread; valid until the parser's next call.
public struct RowValues {
    public var userId: UnsafeRawBufferPointer
    public var name: UnsafeRawBufferPointer
    public var portraitUri: UnsafeRawBufferPointer
}

/// Turns an input stream into profile rows, one at a time, in constant memory.
///
/// Threading: one thread at a time.
public protocol RowParser: AnyObject {
    /// The next row, bad row or the end.
    ///
    /// - Throws: `InputError` when reading fails, `FormatError` when the file
    ///   cannot be interpreted at all.
    func next() throws -> RowEvent
    /// The values of the row the last `.row` event announced.
    var values: RowValues { get }
    /// Input bytes consumed so far, for progress.
    var bytesConsumed: Int { get }
}

/// The formats `import` reads and `export` writes.
///
/// Threading: a plain value; any thread.
public enum FileFormat: String, Sendable, CaseIterable {
    case csv
    case jsonl

    /// The format a file name's extension names, if any.
    public init?(fileName: String) {
        let lower = fileName.lowercased()
        if lower.hasSuffix(".csv") {
            self = .csv
        } else if lower.hasSuffix(".jsonl") || lower.hasSuffix(".ndjson") {
            self = .jsonl
        } else {
            return nil
        }
    }

    /// A parser of this format over `input`.
    public func parser(_ input: any ByteInput) -> any RowParser {
        switch self {
        case .csv: CSVParser(input)
        case .jsonl: JSONLinesParser(input)
        }
    }
}
