import ProfileTestSupport
import Testing

/// Deploy/man/profiled.1 against `profiled --help`, so that a new flag cannot ship without
/// its documentation: each flag needs an item under OPTIONS, and each option a config file
/// takes (every flag but --config, --help, --version and the action --init-schema) an item
/// under CONFIGURATION FILE.
@Suite struct ManPageTests {
    func help() throws -> [String] {
        let (status, output) = try runToCompletion(executable("profiled"), ["--help"])
        #expect(status == 0)
        let found = flags(in: output)
        #expect(found.contains("--port") && found.contains("--version"), "\(output)")
        return found
    }

    @Test func everyFlagOfTheHelpHasAnItemUnderOptions() throws {
        let items = try #require(try ManPage("profiled").items(under: "OPTIONS"))
        let documented = Set(items.flatMap { flags(in: $0) })
        for flag in try help() {
            #expect(documented.contains(flag), "'profiled --help' lists \(flag); Deploy/man/profiled.1 has no item for it under OPTIONS")
        }
    }

    @Test func everyConfigKeyHasAnItemUnderConfigurationFile() throws {
        let items = try #require(try ManPage("profiled").items(under: "CONFIGURATION FILE"))
        let documented = Set(items.compactMap { $0.hasPrefix(".B ") ? String($0.dropFirst(3)) : nil })
        for flag in try help() where !["--config", "--help", "--version", "--init-schema"].contains(flag) {
            let key = String(flag.dropFirst(2))
            #expect(documented.contains(key), "profiled takes the config key \(key); Deploy/man/profiled.1 has no '.B \(key)' item for it under CONFIGURATION FILE")
        }
    }
}
