import CommandLineFlags
import Glibc
import ProfileClient
import ProfileProtocol

/// get, set, update, del, exists, count, recent, scan, stats, ping, flushall:
/// one request each, printed for people or, with `--json`, for scripts.
///
/// Threading: runs on the calling thread.
struct OneOffCommand {
    let name: String
    let parsed: ParsedArguments
    let server: ServerOptions
    private let out = OutputFile()
    private var json: Bool { parsed.switches.contains("json") }

    init(name: String, parsed: ParsedArguments, server: ServerOptions) {
        self.name = name
        self.parsed = parsed
        self.server = server
    }

    /// Runs the command; returns 0, or 1 when the answer is "not found" or "no".
    func run() throws(AdminError) -> Int32 {
        // Arguments and values become ids, names and URIs: one decoded with U+FFFD would be stored.
        if let what = parsed.notUTF8.first { throw AdminError.usage("\(what) is not valid UTF-8") }
        let arguments = parsed.arguments.map { Array($0.utf8) }
        // Checked before connecting, so bad arguments are usage errors.
        let recentCount = try recentArgument()
        let scanLimit = try parsed.number("limit", in: 1...Limits.maxCount, otherwise: Limits.scanDefault)!
        if name == "update" && parsed.values["name"] == nil && parsed.values["portrait-uri"] == nil {
            throw AdminError.usage("update needs --name, --portrait-uri or both")
        }
        if name == "flushall", try !confirmFlush() {
            writeStandardError("profilectl: nothing deleted\n")
            return 1
        }

        let connection = try server.connect()
        let code: Int32
        do {
            code = try execute(connection, arguments, recentCount: recentCount, scanLimit: scanLimit)
        } catch .server(let code, let message) {
            throw AdminError.server(code: code, message: message)
        } catch {
            throw AdminError.file("\(error)")
        }
        try out.flush()
        return code
    }

    private func recentArgument() throws(AdminError) -> Int {
        guard name == "recent", let text = parsed.arguments.first else { return Limits.recentDefault }
        return try FlagValue.wholeNumber(text, in: 1...Limits.maxCount, for: "recent", error: AdminError.usage)
    }

    /// On a terminal, asks; elsewhere only `--yes` will do. False when the answer is no.
    private func confirmFlush() throws(AdminError) -> Bool {
        if parsed.switches.contains("yes") { return true }
        guard isatty(0) == 1 else {
            throw AdminError.usage("flushall deletes every profile: pass --yes when standard input is not a terminal")
        }
        writeStandardError("Delete every profile on \(server.endpoint)? [y/N] ")
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while read(0, &byte, 1) == 1 && byte != 0x0A { answer.append(byte) }
        let text = String(decoding: answer, as: UTF8.self).lowercased()
        return text == "y" || text == "yes"
    }

    private func execute(_ c: ProfileConnection, _ arguments: [[UInt8]], recentCount: Int,
                         scanLimit: Int) throws(ClientError) -> Int32 {
        switch name {
        case "get":
            let profiles = try c.mget(arguments)
            if json {
                say("[" + profiles.map { $0.map(jsonObject) ?? "null" }.joined(separator: ",") + "]")
            } else {
                for (id, profile) in zip(arguments, profiles) {
                    say(profile.map(humanLine) ?? "\(display(id))  not found")
                }
            }
            return profiles.contains { $0 == nil } ? 1 : 0
        case "set":
            try c.set(Profile(userId: arguments[0], name: arguments[1], portraitUri: arguments[2]))
            say(json ? #"{"stored":true}"# : "stored")
            return 0
        case "update":
            let found = try c.update(arguments[0], name: parsed.values["name"].map { Array($0.utf8) },
                                     portraitUri: parsed.values["portrait-uri"].map { Array($0.utf8) })
            say(json ? #"{"updated":\#(found)}"# : found ? "updated" : "\(display(arguments[0]))  not found")
            return found ? 0 : 1
        case "del":
            let found = try c.del(arguments[0])
            say(json ? #"{"deleted":\#(found)}"# : found ? "deleted" : "\(display(arguments[0]))  not found")
            return found ? 0 : 1
        case "exists":
            let found = try c.exists(arguments[0])
            say(json ? #"{"exists":\#(found)}"# : found ? "yes" : "no")
            return found ? 0 : 1
        case "count":
            let n = try c.count()
            say(json ? #"{"count":\#(n)}"# : "\(n)")
            return 0
        case "recent":
            printProfiles(try c.recent(recentCount))
            return 0
        case "scan":
            printProfiles(try c.scan(after: Array((parsed.values["after"] ?? "").utf8), limit: scanLimit))
            return 0
        case "stats":
            let stats = try c.stats()
            if json {
                let fields = stats.map { stat in
                    let value = !stat.value.isEmpty && stat.value.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
                        ? stat.value : RecordWriter.jsonString(Array(stat.value.utf8))
                    return RecordWriter.jsonString(Array(stat.name.utf8)) + ":" + value
                }
                say("{" + fields.joined(separator: ",") + "}")
            } else {
                let width = stats.map(\.name.count).max() ?? 0
                for stat in stats { say(stat.name.padding(toLength: width + 1) + " " + stat.value) }
            }
            return 0
        case "ping":
            try c.ping()
            say(json ? #"{"pong":true}"# : "PONG")
            return 0
        case "flushall":
            try c.flushAll()
            say(json ? #"{"flushed":true}"# : "flushed")
            return 0
        default:
            preconditionFailure("no one-off command \(name)")
        }
    }

    private func printProfiles(_ profiles: [Profile]) {
        if json {
            say("[" + profiles.map(jsonObject).joined(separator: ",") + "]")
        } else {
            for profile in profiles { say(humanLine(profile)) }
        }
    }

    private func say(_ line: String) {
        try? out.write(line + "\n")
    }

    private func humanLine(_ p: Profile) -> String {
        "\(display(p.userId))  \(display(p.name))  \(display(p.portraitUri))"
    }

    private func jsonObject(_ p: Profile) -> String {
        "{\"userId\":\(RecordWriter.jsonString(p.userId)),\"name\":\(RecordWriter.jsonString(p.name)),"
            + "\"portraitUri\":\(RecordWriter.jsonString(p.portraitUri))}"
    }
}

/// A value for a terminal: control characters shown as escapes, so one
/// profile stays on one line.
func display(_ value: [UInt8]) -> String {
    var out: [UInt8] = []
    for b in value {
        switch b {
        case 0x0A: out += Array("\\n".utf8)
        case 0x0D: out += Array("\\r".utf8)
        case 0x09: out += Array("\\t".utf8)
        case 0..<0x20, 0x7F:
            let hex = Array("0123456789abcdef".utf8)
            out += [0x5C, 0x78, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
        default: out.append(b)
        }
    }
    return String(decoding: out, as: UTF8.self)
}
