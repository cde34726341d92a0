import CommandLineFlags
import ProfileClient

/// A command's flags, arguments and help.
///
/// Threading: constants; any thread.
struct CommandSpec {
    var name: String
    var usage: String
    var summary: String
    var details: String
    /// Flags that take a value, without the leading dashes.
    var valueFlags: Set<String>
    /// Flags that take none.
    var switches: Set<String>
    var arguments: ClosedRange<Int>

    static let connectionFlags: Set<String> = ["host", "port", "unix", "token", "cacert", "cert", "key", "sni"]
    static let connectionSwitches: Set<String> = ["tls", "insecure"]
    static let connectionUsage = "[--host HOST] [--port PORT | --unix PATH] [--token TOKEN] [--tls [--cacert FILE] [--cert FILE --key FILE] [--sni NAME] [--insecure]]"
    static let connectionHelp = """
          --host HOST         server address (default 127.0.0.1)
          --port PORT         server port (default 7711)
          --unix PATH         connect over a Unix socket instead
          --token TOKEN       authenticate first (default: $PROFILED_TOKEN)
          --tls               connect over TLS, to one of profiled's TLS listeners
          --cacert FILE       the CA the server's certificate must chain to (default: the system's)
          --cert FILE         a client certificate, for a server that asks for one (with --key)
          --key FILE          the client certificate's private key
          --sni NAME          the name the server's certificate must carry (default: --host)
          --insecure          do not check the server's certificate

        """

    static func oneOff(_ name: String, _ usage: String, _ summary: String, arguments: ClosedRange<Int>,
                       valueFlags: Set<String> = [], switches: Set<String> = [], details: String = "") -> CommandSpec {
        CommandSpec(name: name, usage: usage, summary: summary,
                    details: details + "  --json              print JSON for scripts\n" + connectionHelp,
                    valueFlags: connectionFlags.union(valueFlags), switches: switches.union(["json"]),
                    arguments: arguments)
    }

    static let all: [CommandSpec] = [
        CommandSpec(
            name: "import",
            usage: "profilectl import FILE... [--format csv|jsonl] [--db PATH] [--strict] [--batch N] [--max-line BYTES]",
            summary: "load profiles from CSV or JSON Lines files",
            details: """
                  FILE                a .csv or .jsonl file; - reads standard input (needs --format)
                  --format csv|jsonl  the format of every file (default: from each file's extension)
                  --db PATH           write straight into a store file no server is using
                  --strict            stop at the first bad row; nothing of its batch is written
                  --batch N           rows per MSET online (default 1000), per transaction offline (default 1000000)
                  --max-line BYTES    online: the server's --max-line, when lower than 65536; MSET lines
                                      stay within it and a row that cannot fit is a bad row

                Bad rows are reported as FILE:LINE: reason and skipped. Exit 0 when every row went in,
                1 when some were rejected, 2 on a file, store, connection or server error, 64 on bad flags.

                """ + connectionHelp,
            valueFlags: connectionFlags.union(["format", "db", "batch", "max-line"]), switches: ["strict"],
            arguments: 1...Int.max),
        CommandSpec(
            name: "export", usage: "profilectl export [--format jsonl|csv] [-o FILE] [--db PATH]",
            summary: "write every profile as JSON Lines or CSV, in userId order",
            details: """
                  --format jsonl|csv  output format (default jsonl)
                  -o, --output FILE   write to FILE instead of standard output; FILE is replaced
                                      only when the export succeeds
                  --db PATH           read a store file no server is using

                Exit 0 on success, 2 on a file, store, connection or server error, 64 on bad flags.

                """ + connectionHelp,
            valueFlags: connectionFlags.union(["format", "output", "db"]), switches: [], arguments: 0...0),
        .oneOff("get", "profilectl get ID...", "show profiles (exit 1 when one is not found)", arguments: 1...1000),
        .oneOff("set", "profilectl set ID NAME URI", "create or replace a profile", arguments: 3...3),
        .oneOff("update", "profilectl update ID [--name NAME] [--portrait-uri URI]",
                "change fields of an existing profile (exit 1 when not found)", arguments: 1...1,
                valueFlags: ["name", "portrait-uri"],
                details: "  --name NAME         the new display name\n  --portrait-uri URI  the new portrait URI\n"),
        .oneOff("del", "profilectl del ID", "delete a profile (exit 1 when not found)", arguments: 1...1),
        .oneOff("exists", "profilectl exists ID", "say whether a profile exists (exit 1 when not)", arguments: 1...1),
        .oneOff("count", "profilectl count", "count the profiles", arguments: 0...0),
        .oneOff("recent", "profilectl recent [N]", "show the N most recently written profiles (default 20)",
                arguments: 0...1),
        .oneOff("scan", "profilectl scan [--after ID] [--limit N]",
                "show up to N profiles (default 100) whose userId sorts after ID", arguments: 0...0,
                valueFlags: ["after", "limit"],
                details: "  --after ID          start after this userId (default: the beginning)\n  --limit N           at most N profiles, 1 to 1000 (default 100)\n"),
        .oneOff("stats", "profilectl stats", "show the server's statistics", arguments: 0...0),
        .oneOff("ping", "profilectl ping", "check that the server answers", arguments: 0...0),
        .oneOff("flushall", "profilectl flushall [--yes]", "delete every profile", arguments: 0...0,
                switches: ["yes"],
                details: "  --yes               do not ask; required when standard input is not a terminal\n"),
    ]

    /// What the usage calls the arguments, in order: `set ID NAME URI` gives ID, NAME, URI.
    var argumentNames: [String] {
        usage.split(separator: " ").dropFirst(2).prefix { !$0.hasPrefix("[-") }
            .map { String($0.filter { $0 != "[" && $0 != "]" && $0 != "." }) }
    }

    static func named(_ name: String) -> CommandSpec? {
        all.first { $0.name == name }
    }

    /// The usage with every flag the command takes, connection flags included: what a bad
    /// command line is answered with.
    var fullUsage: String {
        usage + (switches.contains("json") ? " [--json]" : "") + " " + Self.connectionUsage
    }

    var help: String {
        "usage: \(fullUsage)\n\n\(summary.prefix(1).uppercased() + summary.dropFirst()).\n\n\(details)"
    }

    static var overview: String {
        var text = "usage: profilectl COMMAND [ARGS] [options]\n\ncommands:\n"
        for spec in all {
            text += "  " + spec.name.padding(toLength: 10) + spec.summary + "\n"
        }
        text += """

            'profilectl help COMMAND' or 'profilectl COMMAND --help' describes a command.
            Exit codes: 0 success; 1 rejected rows, not found, or a server ERROR; 2 a file, store or
            connection error (import: also a server error); 64 bad flags or arguments.

            """
        return text
    }
}

/// A command line split into flags and arguments against a command's spec.
///
/// Threading: a plain value; any thread.
struct ParsedArguments {
    var values: [String: String] = [:]
    var switches: Set<String> = []
    var arguments: [String] = []
    var wantsHelp = false
    /// What was not valid UTF-8 as given, in order: `argument 2 (NAME)` or `the value of --name`.
    var notUTF8: [String] = []

    /// - Parameter notUTF8: The indices of the words that were not valid UTF-8 (and were
    ///   decoded with U+FFFD in their place).
    init(_ words: [String], spec: CommandSpec, notUTF8 invalid: Set<Int> = []) throws(AdminError) {
        let names = spec.argumentNames
        var reader = FlagReader(words, error: AdminError.usage)
        var onlyArguments = false
        while let word = reader.nextWord() {
            if onlyArguments || word == "-" || !word.hasPrefix("-") {
                if invalid.contains(reader.position - 1) {
                    let name = names.isEmpty ? "" : " (\(names[min(arguments.count, names.count - 1)]))"
                    notUTF8.append("argument \(arguments.count + 1)\(name)")
                }
                arguments.append(word)
                continue
            }
            if word == "--" {
                onlyArguments = true
                continue
            }
            if word == "-h" || word == "--help" {
                wantsHelp = true
                continue
            }
            // One dash will do as well as two (`-db`), and `-o` is `--output`. A message names
            // the flag as typed, which only a flag without an attached value ever needs.
            let long = Flag("--" + (word == "-o" ? "output" : word.drop { $0 == "-" }))
            let flag = long.inlineValue == nil ? Flag(spelling: word, name: long.name) : long
            if (spec.switches.contains(flag.name) || CommandSpec.connectionSwitches.contains(flag.name)) && flag.inlineValue == nil {
                switches.insert(flag.name)
            } else if spec.valueFlags.contains(flag.name) {
                let valuePosition = flag.inlineValue == nil ? reader.position : reader.position - 1
                if invalid.contains(valuePosition) { notUTF8.append("the value of --\(flag.name)") }
                values[flag.name] = try reader.value(of: flag)
            } else {
                throw AdminError.usage("\(spec.name) has no option \(word)")
            }
        }
        if wantsHelp { return }
        guard spec.arguments.contains(arguments.count) else {
            let expected = spec.arguments.lowerBound == spec.arguments.upperBound
                ? "\(spec.arguments.lowerBound)"
                : spec.arguments.upperBound == Int.max ? "at least \(spec.arguments.lowerBound)"
                : "\(spec.arguments.lowerBound) to \(spec.arguments.upperBound)"
            throw AdminError.usage("\(spec.name) takes \(expected) argument\(expected == "1" ? "" : "s"), not \(arguments.count)")
        }
    }

    /// A whole number flag in `range`, or `otherwise` when absent.
    func number(_ flag: String, in range: ClosedRange<Int>, otherwise: Int?) throws(AdminError) -> Int? {
        guard let text = values[flag] else { return otherwise }
        return try FlagValue.wholeNumber(text, in: range, for: "--\(flag)", error: AdminError.usage)
    }

    /// The connection flags, with `PROFILED_TOKEN` as the token's fallback.
    ///
    /// - Throws: `.usage` for flags that cannot go together: `--unix` with `--host` or
    ///   `--port`, and `--db` with any connection flag.
    func serverOptions(environment: [String: String]) throws(AdminError) -> ServerOptions {
        if values["unix"] != nil, let flag = ["host", "port"].first(where: { values[$0] != nil }) {
            throw AdminError.usage("--unix connects to a socket, so --\(flag) has no use with it")
        }
        let tls = switches.contains("tls")
        let tlsFlags = ["tls", "cacert", "cert", "key", "sni", "insecure"].filter { values[$0] != nil || switches.contains($0) }
        if values["db"] != nil, let flag = (["host", "port", "unix", "token"].filter { values[$0] != nil } + tlsFlags).first {
            throw AdminError.usage("--db opens the store file without a server, so --\(flag) has no use with it")
        }
        if tls && values["unix"] != nil {
            throw AdminError.usage("--tls connects over TCP, so --unix has no use with it")
        }
        var options = ServerOptions()
        if let host = values["host"] { options.host = host }
        if let port = try number("port", in: 1...65535, otherwise: nil) { options.port = UInt16(port) }
        options.unixPath = values["unix"]
        options.token = values["token"] ?? environment["PROFILED_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        do {
            options.tls = try TLSClientOptions.fromFlags(tls: tls, caCertificate: values["cacert"], certificate: values["cert"],
                                                         key: values["key"], serverName: values["sni"],
                                                         insecure: switches.contains("insecure"))
        } catch {
            throw AdminError.usage(error.message)
        }
        return options
    }
}

extension String {
    func padding(toLength length: Int) -> String {
        count >= length ? self + " " : self + String(repeating: " ", count: length - count)
    }
}
