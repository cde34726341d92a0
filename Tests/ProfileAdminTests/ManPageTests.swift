import ProfileTestSupport
import Testing

/// Deploy/man/profilectl.1 against `profilectl help`: each command needs its own `.SS`, and
/// each flag of `profilectl help COMMAND` an item under that `.SS` or under COMMON OPTIONS,
/// so that a new command or flag cannot ship without its documentation.
@Suite struct ManPageTests {
    @Test func everyCommandAndFlagOfTheHelpIsInTheManPage() throws {
        let overview = try profilectl(["help"])
        #expect(overview.status == 0)
        // The overview lists each command as "  NAME  summary" between "commands:" and a blank line.
        let commands = overview.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            .drop { $0 != "commands:" }.dropFirst().prefix { !$0.isEmpty }
            .compactMap { $0.split(separator: " ").first.map(String.init) }
        #expect(commands.contains("import") && commands.contains("flushall"), "\(overview.stdout)")
        let page = try ManPage("profilectl")
        let common = Set(try #require(page.items(under: "COMMON OPTIONS")).flatMap { flags(in: $0) })
        for command in commands {
            guard let items = page.items(under: command) else {
                Issue.record("'profilectl help' lists \(command); Deploy/man/profilectl.1 has no '.SS \(command)'")
                continue
            }
            let documented = common.union(items.flatMap { flags(in: $0) })
            let help = try profilectl(["help", command])
            #expect(help.status == 0)
            for flag in flags(in: help.stdout) {
                #expect(documented.contains(flag),
                        "'profilectl help \(command)' lists \(flag); Deploy/man/profilectl.1 has no item for it under '.SS \(command)' or COMMON OPTIONS")
            }
        }
    }
}
