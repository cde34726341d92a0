import Glibc
import ProfileClient
import ProfileProtocol
import WireBytes

/// The profilectl command line: parses the words after the program name,
/// runs the command and returns its exit code.
///
/// Threading: runs on the calling thread (the main thread of profilectl).
public enum ProfileCtl {
    /// - Parameter arguments: The words after the program name, as the bytes given.
    public static func main(_ arguments: [[UInt8]], environment: [String: String]) -> Int32 {
        let words = arguments.map { String(decoding: $0, as: UTF8.self) }
        guard let name = words.first else {
            writeStandardError(CommandSpec.overview)
            return 64
        }
        if name == "help" || name == "--help" || name == "-h" {
            guard words.count > 1 else {
                print(CommandSpec.overview, terminator: "")
                return 0
            }
            guard let spec = CommandSpec.named(words[1]) else {
                return usageFailure("no command '\(words[1])'", usage: "profilectl help COMMAND")
            }
            print(spec.help, terminator: "")
            return 0
        }
        guard let spec = CommandSpec.named(name) else {
            return usageFailure("no command '\(name)'", usage: "profilectl COMMAND [ARGS] [options]")
        }
        do throws(AdminError) {
            let notUTF8 = Set(arguments.indices.dropFirst().filter { index in
                arguments[index].withUnsafeBytes { !$0.isEmpty && !isValidUTF8($0.baseAddress!, count: $0.count) }
            }.map { $0 - 1 })
            let parsed = try ParsedArguments(Array(words.dropFirst()), spec: spec, notUTF8: notUTF8)
            if parsed.wantsHelp {
                print(spec.help, terminator: "")
                return 0
            }
            return try run(spec.name, parsed, environment: environment)
        } catch {
            switch error {
            case .usage(let message):
                return usageFailure(message, usage: spec.fullUsage)
            case .server(let code, let message):
                writeStandardError("profilectl: ERROR \(code) \(message)\n")
                return spec.name == "import" || spec.name == "export" ? 2 : 1
            case .file(let message):
                writeStandardError("profilectl: \(message)\n")
                return 2
            }
        }
    }

    /// One line for bad flags or arguments; exit 64.
    private static func usageFailure(_ message: String, usage: String) -> Int32 {
        writeStandardError("profilectl: \(message); usage: \(usage)\n")
        return 64
    }

    private static func run(_ name: String, _ parsed: ParsedArguments,
                            environment: [String: String]) throws(AdminError) -> Int32 {
        let server = try parsed.serverOptions(environment: environment)
        switch name {
        case "import":
            var format: FileFormat? = nil
            if let text = parsed.values["format"] {
                guard let named = FileFormat(rawValue: text) else {
                    throw AdminError.usage("--format takes csv or jsonl, not '\(text)'")
                }
                format = named
            }
            // A file that is not there is reported as such when the import opens it (exit 2).
            for file in parsed.arguments where format == nil && FileFormat(fileName: file) == nil
                && (file == "-" || access(file, F_OK) == 0) {
                throw AdminError.usage(file == "-" ? "reading standard input needs --format csv|jsonl"
                                       : "cannot tell the format of \(file); name it with --format csv|jsonl")
            }
            if parsed.values["db"] != nil && parsed.values["max-line"] != nil {
                throw AdminError.usage("--max-line is the server's line limit, so it has no use with --db")
            }
            let options = ImportOptions(
                files: parsed.arguments, format: format, databasePath: parsed.values["db"], server: server,
                strict: parsed.switches.contains("strict"),
                batchSize: try parsed.number("batch", in: 1...1_000_000, otherwise: nil),
                maxLine: try parsed.number("max-line", in: 64...16_777_216, otherwise: nil))
            let summary = try Importer.run(options)
            writeStandardError(summary.line + "\n")
            return summary.exitCode
        case "export":
            var format = FileFormat.jsonl
            if let text = parsed.values["format"] {
                guard let named = FileFormat(rawValue: text) else {
                    throw AdminError.usage("--format takes jsonl or csv, not '\(text)'")
                }
                format = named
            }
            _ = try Exporter.run(ExportOptions(format: format, outputPath: parsed.values["output"],
                                               databasePath: parsed.values["db"], server: server))
            return 0
        default:
            return try OneOffCommand(name: name, parsed: parsed, server: server).run()
        }
    }
}
