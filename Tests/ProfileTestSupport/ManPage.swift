/// A man page under Deploy/man, read as roff source, so that tests can hold it to an
/// executable's `--help`: a flag added to the help and not to the page fails them.
///
/// Threading: a plain value; any thread.
public struct ManPage {
    /// The source with roff's `\-` written `-` and its inline font escapes and `\&` removed,
    /// so `\fB\-\-max\-line\fR` reads `--max-line`.
    public let text: String

    /// Reads `Deploy/man/NAME.1` of this repository.
    public init(_ name: String, file: String = #filePath) throws {
        let path = repositoryPath("Deploy/man/\(name).1", file: file)
        guard let bytes = readBytes(path) else { throw TestFailure("cannot read \(path)") }
        var text = String(decoding: bytes, as: UTF8.self).replacing("\\-", with: "-").replacing("\\&", with: "")
        for font in ["\\fB", "\\fI", "\\fR", "\\fP"] { text = text.replacing(font, with: "") }
        self.text = text
    }

    /// The lines under `.SH TITLE` or `.SS TITLE` (title as written, dashes unescaped), up to
    /// the next heading of the same level or above; nil when there is no such heading.
    public func section(_ title: String) -> String? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, line) in lines.enumerated() {
            for macro in [".SH", ".SS"] where line == "\(macro) \(title)" || line == "\(macro) \"\(title)\"" {
                let ends: Set<Substring> = macro == ".SH" ? [".SH"] : [".SH", ".SS"]
                let rest = lines[(index + 1)...].prefix { !ends.contains($0.split(separator: " ").first ?? "") }
                return rest.joined(separator: "\n")
            }
        }
        return nil
    }

    /// The tag line of each `.TP` item under the heading, where a page lists its options
    /// (`.BI --host " HOST"`) or config keys (`.B host`); nil when there is no such heading.
    public func items(under title: String) -> [String]? {
        guard let lines = section(title)?.split(separator: "\n", omittingEmptySubsequences: false) else { return nil }
        return zip(lines, lines.dropFirst()).filter { $0.0 == ".TP" }.map { String($0.1) }
    }
}

/// The flags a help text or a man page names, each once, in order of first appearance:
/// `--max-line` and `-o`, but not the dash of `re-run`, a lone `-`, or `--` alone.
public func flags(in text: String) -> [String] {
    let characters = Array(text.unicodeScalars)
    func isFlagCharacter(_ c: Unicode.Scalar) -> Bool {
        (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") || c == "-"
    }
    var found: [String] = []
    var index = 0
    while index < characters.count {
        guard characters[index] == "-", index == 0 || !isFlagCharacter(characters[index - 1]) else {
            index += 1
            continue
        }
        var end = index
        while end < characters.count && isFlagCharacter(characters[end]) { end += 1 }
        let word = String(String.UnicodeScalarView(characters[index..<end]))
        let body = word.drop { $0 == "-" }
        let dashes = word.count - body.count
        if let first = body.unicodeScalars.first, first >= "a" && first <= "z",
           dashes == 2 || (dashes == 1 && body.count == 1), !found.contains(word) {
            found.append(word)
        }
        index = max(end, index + 1)
    }
    return found
}
