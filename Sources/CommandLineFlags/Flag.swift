/// One flag as written on a command line: `--port`, or `--port=7711` with its value attached.
///
/// Threading: a plain value; any thread.
public struct Flag: Equatable, Sendable {
    /// The flag as written, without an attached value: `--port`, `-o`.
    public var spelling: String
    /// The flag's name, without dashes: `port`, or `output` for `-o`. A message that tells how
    /// to attach a value writes it as `--name=VALUE`.
    public var name: String
    /// What followed the first `=`; nil when the flag was written alone.
    public var inlineValue: String?

    public init(spelling: String, name: String, inlineValue: String? = nil) {
        self.spelling = spelling
        self.name = name
        self.inlineValue = inlineValue
    }

    /// `word` read as a flag: a word starting with `--` splits at its first `=` (so
    /// `--db=--odd` gives the value `--odd`) and is named without the two dashes. Any other
    /// word (`-h`, an argument) is taken whole, `=` and all, for the tool to judge.
    public init(_ word: String) {
        guard word.hasPrefix("--") else {
            self.init(spelling: word, name: word)
            return
        }
        guard let equals = word.firstIndex(of: "=") else {
            self.init(spelling: word, name: String(word.dropFirst(2)))
            return
        }
        let spelling = String(word[..<equals])
        self.init(spelling: spelling, name: String(spelling.dropFirst(2)),
                  inlineValue: String(word[word.index(after: equals)...]))
    }
}
