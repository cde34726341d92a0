import ProfileTestSupport
import Testing

/// Deploy/man/profilebench.1 against `profilebench --help`: each flag the help lists needs
/// an item under OPTIONS, so that a new flag cannot ship without its documentation.
@Suite struct ManPageTests {
    @Test func everyFlagOfTheHelpHasAnItemUnderOptions() throws {
        let (status, output) = try runToCompletion(executable("profilebench"), ["--help"])
        #expect(status == 0)
        let listed = flags(in: output)
        #expect(listed.contains("--target") && listed.contains("--json"), "\(output)")
        let items = try #require(try ManPage("profilebench").items(under: "OPTIONS"))
        let documented = Set(items.flatMap { flags(in: $0) })
        for flag in listed {
            #expect(documented.contains(flag), "'profilebench --help' lists \(flag); Deploy/man/profilebench.1 has no item for it under OPTIONS")
        }
    }
}
