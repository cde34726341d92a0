import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// README.md's "Try it" examples, replayed in the order written against one fresh server
/// (one store, both fronts): what a new user types gets what the README shows.
@Suite struct ReadmeExampleTests {
    /// The fenced blocks of README's "Try it" section, each as its lines.
    static func tryItBlocks() throws -> [[String]] {
        let readme = readText(repositoryPath("README.md"))
        guard let start = readme.firstRange(of: "## Try it"), let end = readme[start.upperBound...].firstRange(of: "\n## ") else {
            throw TestFailure("README.md has no \"Try it\" section")
        }
        var blocks: [[String]] = []
        var current: [String]? = nil
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                if let block = current { blocks.append(block) }
                current = current == nil ? [] : nil
            } else if current != nil {
                current!.append(String(line))
            }
        }
        return blocks
    }

    /// The line protocol's verbs: a line of the nc session that starts with one is typed.
    static let verbs: Set<String> = ["PING", "GET", "MGET", "SET", "MSET", "UPDATE", "DEL", "EXISTS", "COUNT", "RECENT",
                                     "SCAN", "STATS", "AUTH", "FLUSHALL", "QUIT"]

    /// Words as a POSIX shell splits them, for the README's commands: blanks apart, double
    /// quotes kept together.
    static func shellWords(_ line: Substring) -> [String] {
        var words: [String] = [], word = "", quoted = false, inWord = false
        for character in line {
            if character == "\"" { quoted.toggle(); inWord = true } else if character == " " && !quoted {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if inWord { words.append(word) }
        return words
    }

    @Test func theTryItExamplesGiveWhatTheyShowInTheOrderWritten() throws {
        let blocks = try Self.tryItBlocks()
        try #require(blocks.count == 2, "expected the nc session and the redis-cli session")
        let server = try TestServer(["--resp-port", "0"])

        // The nc session: each typed line, then the reply lines shown up to the next typed one.
        // A STAT line's value varies (uptime): its name must match. "..." stands for the lines
        // a reply has before the next one shown.
        let nc = blocks[0]
        try #require(nc.first == "$ Scripts/run &" && nc.dropFirst().first == "$ nc 127.0.0.1 7711")
        let connection = try server.connect()
        var index = 2
        var typed = 0
        while index < nc.count {
            let request = nc[index]
            try #require(Self.verbs.contains(String(request.split(separator: " ").first ?? "")), "not a request: \(request)")
            connection.sendRaw(Array((request + "\n").utf8))
            try connection.flush()
            typed += 1
            index += 1
            var skipping = false
            while index < nc.count, !Self.verbs.contains(String(nc[index].split(separator: " ").first ?? "")) {
                let shown = nc[index]
                index += 1
                if shown == "..." {
                    skipping = true
                    continue
                }
                var reply = try connection.line()
                while skipping && reply != shown { reply = try connection.line() }
                skipping = false
                if shown.hasPrefix("STAT ") {
                    let name = shown.split(separator: " ").dropFirst().first ?? ""
                    #expect(reply.hasPrefix("STAT \(name) "), "after \(request): README shows \(shown), profiled said \(reply)")
                } else {
                    #expect(reply == shown, "after \(request): README shows \(shown), profiled said \(reply)")
                }
            }
        }
        #expect(typed == 8)

        // The redis-cli session: each command run as written, against the RESP port, with
        // redis-cli's formatting for a terminal.
        let cli = blocks[1]
        index = 0
        var commands = 0
        while index < cli.count {
            let command = cli[index]
            try #require(command.hasPrefix("$ redis-cli -p 6380 "), "not a command: \(command)")
            let arguments = Self.shellWords(command.dropFirst("$ redis-cli -p 6380 ".count))
            index += 1
            var shown: [String] = []
            while index < cli.count, !cli[index].hasPrefix("$ ") {
                shown.append(cli[index])
                index += 1
            }
            let run = try runCommand(["redis-cli", "--no-raw", "-p", "\(server.respPort)"] + arguments)
            #expect(run.status == 0, "\(command): \(run)")
            #expect(run.stdout == shown.map { $0 + "\n" }.joined(), "\(command): README shows \(shown), redis-cli printed \(run.stdout)")
            commands += 1
        }
        #expect(commands == 3)
    }
}
