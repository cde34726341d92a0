import Glibc
import ProfileBench

/// Writes to standard error (the C `stderr` global is not concurrency-safe in Swift 6).
func printError(_ text: String) {
    var bytes = Array((text + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeMutableBytes { write(STDERR_FILENO, $0.baseAddress! + offset, $0.count - offset) }
        if n <= 0 { return }
        offset += n
    }
}

let options: BenchOptions
do {
    switch try BenchOptions.parse(Array(CommandLine.arguments.dropFirst())) {
    case .help:
        print(helpText)
        exit(0)
    case .run(let parsed):
        options = parsed
    }
} catch {
    printError("profilebench: \(error.message) (see 'profilebench --help')")
    exit(64)
}

// A server that closes a connection must show up as a clear message, not a SIGPIPE.
signal(SIGPIPE, SIG_IGN)
let live: (@Sendable (String) -> Void)? = isatty(STDERR_FILENO) == 1 ? { @Sendable line in printError(line) } : nil
do {
    let result = try LoadTest.run(options, live: live)
    print(options.json ? result.json : result.text)
    if let failure = result.failure { printError("profilebench: \(failure)") }
    exit(result.succeeded ? 0 : 1)
} catch {
    printError("profilebench: \(error)")
    exit(1)
}
