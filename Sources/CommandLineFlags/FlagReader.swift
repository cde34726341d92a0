/// Walks a command line's words and takes each flag's value, with the checks and messages
/// every tool gives alike; which flags exist, and which go together, stays with the tool.
///
/// Failures are one sentence, handed to `error` to become the tool's own error type, so the
/// tool's parser throws only that type.
///
/// Threading: a cursor over one command line; one thread at a time.
public struct FlagReader<Failure: Error> {
    public let words: [String]
    /// The index in `words` of the next word to read.
    public private(set) var position = 0
    private let error: (String) -> Failure

    public init(_ words: [String], error: @escaping (String) -> Failure) {
        self.words = words
        self.error = error
    }

    /// The next word as it stands, for tools that tell arguments from flags themselves.
    public mutating func nextWord() -> String? {
        guard position < words.count else { return nil }
        position += 1
        return words[position - 1]
    }

    /// The next word read as a flag (see `Flag.init(_:)`); nil after the last word.
    public mutating func nextFlag() -> Flag? {
        nextWord().map(Flag.init(_:))
    }

    /// The flag's value: the one attached with `=`, else the next word.
    ///
    /// - Throws: When no word follows, or the next word starts with `--`: a forgotten value
    ///   must not swallow the next flag (`--db --port 0`), and `--db=--odd` is how to give
    ///   such a value.
    public mutating func value(of flag: Flag) throws(Failure) -> String {
        if let inlineValue = flag.inlineValue { return inlineValue }
        guard position < words.count else { throw error(FlagMessage.needsValue(flag)) }
        guard !words[position].hasPrefix("--") else { throw error(FlagMessage.needsValue(flag, notFlag: words[position])) }
        position += 1
        return words[position - 1]
    }

    /// The flag's value as a whole number in `range`.
    public mutating func wholeNumber(of flag: Flag, in range: ClosedRange<Int>) throws(Failure) -> Int {
        try FlagValue.wholeNumber(try value(of: flag), in: range, for: flag.spelling, error: error)
    }

    /// The flag's value as a decimal number in `range`.
    public mutating func decimalNumber(of flag: Flag, in range: ClosedRange<Double>) throws(Failure) -> Double {
        try FlagValue.decimalNumber(try value(of: flag), in: range, for: flag.spelling, error: error)
    }

    /// Checks that a switch, which takes no value, was not given one with `=`.
    public func refuseValue(of flag: Flag) throws(Failure) {
        if flag.inlineValue != nil { throw error(FlagMessage.takesNoValue(flag)) }
    }
}
