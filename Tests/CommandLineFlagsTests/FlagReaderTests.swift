import CommandLineFlags
import Testing

/// The error the tests have the reader throw: the sentence alone.
struct Problem: Error, Equatable {
    var message: String
}

/// Reads `words` as a tool would: `--count` a whole number from 1 to 10, `--ratio` a number
/// from 0 to 1, `--quiet` a switch, any other flag a plain value.
func read(_ words: [String]) throws(Problem) -> [String: String] {
    var reader = FlagReader(words, error: Problem.init(message:))
    var values: [String: String] = [:]
    while let flag = reader.nextFlag() {
        switch flag.name {
        case "count": values["count"] = String(try reader.wholeNumber(of: flag, in: 1...10))
        case "ratio": values["ratio"] = String(try reader.decimalNumber(of: flag, in: 0...1))
        case "quiet":
            try reader.refuseValue(of: flag)
            values["quiet"] = "on"
        default: values[flag.spelling] = try reader.value(of: flag)
        }
    }
    return values
}

@Suite struct FlagReaderTests {
    @Test func aValueIsAttachedWithEqualsOrIsTheNextWord() throws {
        #expect(try read(["--db=/tmp/a", "--host", "h", "--count=3", "--ratio", "0.5", "--quiet"])
                == ["--db": "/tmp/a", "--host": "h", "count": "3", "ratio": "0.5", "quiet": "on"])
        // Only the first `=` splits; an empty value is still a value.
        #expect(try read(["--where=a=b", "--empty="]) == ["--where": "a=b", "--empty": ""])
    }

    @Test func aValueThatStartsWithTwoDashesIsGivenWithEquals() throws {
        #expect(try read(["--db=--odd"]) == ["--db": "--odd"])
        // One dash, or a lone dash, is an ordinary value.
        #expect(try read(["--db", "-", "--host", "-x"]) == ["--db": "-", "--host": "-x"])
    }

    @Test(arguments: [
        (["--db"], "--db needs a value"),
        (["--host", "h", "--db"], "--db needs a value"),
        (["--db", "--quiet"], "--db needs a value, not the flag --quiet (write --db=VALUE for a value that starts with --)"),
        (["--db", "--"], "--db needs a value, not the flag -- (write --db=VALUE for a value that starts with --)"),
        (["--count", "11"], "--count takes a whole number from 1 to 10, not '11'"),
        (["--count=x"], "--count takes a whole number from 1 to 10, not 'x'"),
        (["--count", "--ratio", "1"],
         "--count needs a value, not the flag --ratio (write --count=VALUE for a value that starts with --)"),
        (["--ratio", "1.5"], "--ratio takes a number from 0.0 to 1.0, not '1.5'"),
        (["--quiet=yes"], "--quiet takes no value"),
        (["--quiet="], "--quiet takes no value"),
    ])
    func aBadFlagIsOneSentence(words: [String], message: String) {
        #expect(throws: Problem(message: message)) { try read(words) }
    }

    @Test func aSwitchLeavesTheNextWordAlone() throws {
        var reader = FlagReader(["--quiet", "file"], error: Problem.init(message:))
        let next = reader.nextFlag()
        let flag = try #require(next)
        try reader.refuseValue(of: flag)
        let argument = reader.nextWord()
        #expect(argument == "file")
        let end = reader.nextWord()
        #expect(end == nil && reader.position == 2)
    }

    @Test func onlyTwoDashesSplitAtEquals() {
        #expect(Flag("--port=7711") == Flag(spelling: "--port", name: "port", inlineValue: "7711"))
        #expect(Flag("--port") == Flag(spelling: "--port", name: "port"))
        // A word with one dash, or an argument, is the tool's to judge as it stands.
        #expect(Flag("-h=x") == Flag(spelling: "-h=x", name: "-h=x"))
        #expect(Flag("a=b") == Flag(spelling: "a=b", name: "a=b"))
    }

    @Test func aMessageCanNameTheLongFormOfAShortFlag() {
        var reader = FlagReader(["-o", "--json"], error: Problem.init(message:))
        _ = reader.nextWord()
        #expect(throws: Problem(message: "-o needs a value, not the flag --json (write --output=VALUE for a value that starts with --)")) {
            try reader.value(of: Flag(spelling: "-o", name: "output"))
        }
    }

    @Test func textIsReadAsANumberUnderItsOwnLabel() throws {
        #expect(try FlagValue.wholeNumber("7", in: 1...10, for: "recent", error: Problem.init(message:)) == 7)
        #expect(throws: Problem(message: "cache-mb takes a whole number from 1 to 1048576, not 'lots'")) {
            try FlagValue.wholeNumber("lots", in: 1...1_048_576, for: "cache-mb", error: Problem.init(message:))
        }
        #expect(try FlagValue.decimalNumber("0.25", in: 0...1, for: "--ratio", error: Problem.init(message:)) == 0.25)
        #expect(throws: Problem(message: "--duration takes a number from 0.1 to 86400.0, not '0'")) {
            try FlagValue.decimalNumber("0", in: 0.1...86_400, for: "--duration", error: Problem.init(message:))
        }
    }
}
