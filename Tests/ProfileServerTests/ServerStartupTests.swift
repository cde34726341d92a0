import ProfileTestSupport
import Glibc
import ProfileClient
import ProfileProtocol
import ProfileServer
import Testing

/// Flags, the default store location, and refusing files that are not ours.
@Suite struct ServerStartupTests {
    @Test func badFlagsGetOneUsageLineAndExit64() throws {
        for args in [["--bogus"], ["--port"], ["--port", "70000"], ["--cache-mb", "x"], ["--sync", "sometimes"],
                     ["--threads", "0"], ["stray"], ["--allow-insecure-bind=yes"], ["--max-line", "-1"],
                     ["--tokens", "--allow-insecure-bind"], ["--init-schema"], ["--init-schema=yes"],
                     ["--max-client-memory", "12x"], ["--max-client-memory", "1000"], ["--max-client-memory", "-1mb"],
                     ["--max-client-memory", "2048gb"],
                     ["--db", "p.sqlite3", "--init-schema"], ["--port", "of"], ["--port", "off"],
                     ["--tls-port", "0"], ["--tls-port", "x"], ["--resp-tls-port", "0", "--tls-cert-file", "c.pem"],
                     ["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"], ["--tls-auth-clients", "yes"],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "maybe"],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "optional"],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-protocols", "TLSv1.1"],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-protocols", ""],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-handshake-timeout", "0"],
                     ["--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-ciphersuites", ""],
                     ["--host", "0.0.0.0", "--tls-port", "0", "--tls-cert-file", "c", "--tls-key-file", "k",
                      "--tls-ca-cert-file", "ca", "--tls-auth-clients", "yes"], ["--metrics-tls"], ["--metrics-tls=yes"],
                     ["--metrics", "127.0.0.1:0", "--metrics-tls"]] {
            let (status, output) = try runToCompletion(executable("profiled"), args)
            #expect(status == 64, "\(args)")
            #expect(output.split(separator: "\n").count == 1, "\(args): \(output)")
        }
    }

    /// The server's default `--max-line`, which sizes its reads, is the line codec's.
    @Test func theDefaultLongestLineIsTheLineCodecs() {
        #expect(ServerConfiguration().maxLine == Limits.defaultMaxLine)
    }

    @Test func helpAndVersion() throws {
        let (status, output) = try runToCompletion(executable("profiled"), ["--help"])
        #expect(status == 0)
        for flag in ["--host", "--port", "--unix", "--db", "--cache-mb", "--threads", "--tokens", "--max-connections",
                     "--max-line", "--sync", "--allow-insecure-bind", "--help", "--version"] {
            #expect(output.contains(flag), "help lacks \(flag)")
        }
        let version = try runToCompletion(executable("profiled"), ["--version"])
        #expect(version.status == 0)
        #expect(version.output.hasPrefix("profiled "))
    }

    @Test func defaultStoreFollowsCacheDirectoryThenXDGThenHome() throws {
        let root = try makeTemporaryDirectory()
        let viaSystemd = try TestServer([], directory: root, environment: ["CACHE_DIRECTORY": root + "/systemd"])
        #expect(viaSystemd.log.contains("path=\(root)/systemd/profiles.sqlite3"))
        viaSystemd.stop()
        let viaXDG = try TestServer([], directory: root, environment: ["XDG_CACHE_HOME": root + "/xdg"])
        #expect(viaXDG.log.contains("path=\(root)/xdg/profiled/profiles.sqlite3"))
        viaXDG.stop()
        let viaHome = try TestServer([], directory: root, environment: ["HOME": root + "/home"])
        #expect(viaHome.log.contains("path=\(root)/home/.cache/profiled/profiles.sqlite3"))
        let c = try viaHome.connect()
        try c.set(Profile(userId: "a", name: "b", portraitUri: "c"))
        #expect(access(root + "/home/.cache/profiled/profiles.sqlite3", F_OK) == 0)
    }

    @Test func aFileThatIsNotOursStopsStartupUntouched() throws {
        let directory = try makeTemporaryDirectory()
        let path = directory + "/notes.txt"
        let text = String(repeating: "not a database, just some notes\n", count: 200)
        writeText(path, text)
        let (status, output) = try runToCompletion(executable("profiled"), ["--port", "0", "--db", path])
        #expect(status != 0)
        #expect(output.contains(path))
        #expect(output.split(separator: "\n").count == 1, "\(output)")
        #expect(readText(path) == text)
        #expect(access(path + ".lock", F_OK) != 0, "a lock file was left beside it")
    }

    /// The lock file marks a running server: a clean stop removes it; a killed server leaves
    /// it, and the next start takes it over.
    @Test func aCleanStopRemovesTheLockFileAndAKilledServerLeavesIt() throws {
        let server = try TestServer()
        let lock = server.databasePath + ".lock"
        #expect(access(lock, F_OK) == 0)
        #expect(try server.connect().roundTrip("SET a n u\n") == "STORED")
        #expect(server.stop(signal: SIGTERM) == 0)
        #expect(access(lock, F_OK) != 0, "a clean stop left the lock file")
        try server.start()
        #expect(try server.connect().roundTrip("GET a\n") == "VALUE a n u")
        _ = server.stop(signal: SIGKILL)
        #expect(access(lock, F_OK) == 0)
        try server.start()
        #expect(try server.connect().roundTrip("GET a\n") == "VALUE a n u")
        let (status, output) = try runToCompletion(executable("profiled"), ["--port", "0", "--db", server.databasePath])
        #expect(status != 0, "a second server took a store the first holds: \(output)")
    }

    @Test func aSecondServerOnTheSameStoreIsRefused() throws {
        let first = try TestServer()
        let (status, output) = try runToCompletion(executable("profiled"), ["--port", "0", "--db", first.databasePath])
        #expect(status != 0)
        #expect(output.contains(first.databasePath))
    }
}
