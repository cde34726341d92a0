import Glibc
import ProfileServer

func fail(_ line: String, code: Int32) -> Never {
    var bytes = Array((line + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
    exit(code)
}

let parsed: Parsed
do {
    parsed = try parseArguments(Array(CommandLine.arguments.dropFirst()))
} catch {
    fail("profiled: \(error.message) (see 'profiled --help')", code: 64)
}

switch parsed {
case .help:
    print(usage)
case .version:
    print(version)
case .run(let configuration, let logLevel):
    Log.level = logLevel
    let server: Server
    do {
        server = try Server(configuration: configuration)
    } catch {
        Log.error("cannot start", ["error": error.description])
        exit(1)
    }
    server.run()
}
