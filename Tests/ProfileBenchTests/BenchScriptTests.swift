import ProfileTestSupport
import Testing

/// Scripts/bench refuses bad flags with one sentence and exit 64, before it installs or builds
/// anything.
@Suite struct BenchScriptTests {
    @Test(arguments: [
        (["--keys"], "Scripts/bench: --keys needs a value"),
        (["--keys", "x"], "Scripts/bench: --keys needs a whole number of profiles, 1 or more"),
        (["--keys", "0"], "Scripts/bench: --keys needs a whole number of profiles, 1 or more"),
        (["--seconds", "x"], "Scripts/bench: --seconds needs a whole number of seconds, 1 to 99999"),
        (["--tracking-cost", "--seconds", "0"], "Scripts/bench: --seconds needs a whole number of seconds, 1 to 99999"),
        (["--sustain-seconds", "-1"], "Scripts/bench: --sustain-seconds needs a whole number of seconds, 0 to 99999"),
        (["--threads", "0"], "Scripts/bench: --threads needs a whole number of profiled's workers, 1 to 256"),
        (["--threads", "257"], "Scripts/bench: --threads needs a whole number of profiled's workers, 1 to 256"),
        (["--cluster", "--keys", "63"],
         "Scripts/bench: --cluster needs --keys 64 or more, since the floor's statements upsert 64 distinct ids"),
        (["--client-cache", "--cluster"], "Scripts/bench: --client-cache runs alone, not with --compare, --cluster or --tls"),
        (["--rtt-us", "x"], "Scripts/bench: --rtt-us needs a whole number of microseconds, 0 to 1000000"),
        (["--client-cache", "--rtt-us", "1000001"], "Scripts/bench: --rtt-us needs a whole number of microseconds, 0 to 1000000"),
        (["--client-cache", "--rtt-us", "08"], "Scripts/bench: --rtt-us needs a whole number of microseconds, 0 to 1000000"),
        (["--rtt-us", "500"], "Scripts/bench: --rtt-us goes with --client-cache"),
        (["--tracking-cost", "--compare"],
         "Scripts/bench: --tracking-cost runs alone, not with --compare, --cluster, --tls or --client-cache"),
        (["--client-cache", "--tracking-cost"],
         "Scripts/bench: --tracking-cost runs alone, not with --compare, --cluster, --tls or --client-cache"),
        (["--tracking-cost", "--keys", "0"], "Scripts/bench: --keys needs a whole number of profiles, 1 or more"),
        (["--hit-ratio", "--compare"],
         "Scripts/bench: --hit-ratio runs alone, not with --compare, --cluster, --tls, --client-cache or --tracking-cost"),
        (["--tracking-cost", "--hit-ratio"],
         "Scripts/bench: --hit-ratio runs alone, not with --compare, --cluster, --tls, --client-cache or --tracking-cost"),
        (["--hit-ratio", "--seconds", "3"], "Scripts/bench: --hit-ratio replays fixed sequences: it takes no --seconds or --keys"),
        (["--hit-ratio", "--keys", "1000"], "Scripts/bench: --hit-ratio replays fixed sequences: it takes no --seconds or --keys"),
        (["--hit-ratio", "--threads", "0"], "Scripts/bench: --threads needs a whole number of profiled's workers, 1 to 256"),
        (["--fast"], "usage: Scripts/bench [--compare] [--cluster] [--tls] [--seconds N] [--sustain-seconds N] [--keys N] [--threads N]"),
    ])
    func aBadFlagStopsWithOneSentence(arguments: [String], message: String) throws {
        let (status, output) = try runToCompletion("/bin/bash", [repositoryPath("Scripts/bench")] + arguments)
        #expect(status == 64, "\(output)")
        #expect(output.hasPrefix(message), "\(output)")
    }
}
