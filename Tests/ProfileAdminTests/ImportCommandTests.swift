import ProfileTestSupport
import Glibc
import Testing

@Suite struct ImportCommandTests {
    @Test func exitCodesAllGoodSomeBadAndUnusable() throws {
        let server = try TestServer()
        let dir = server.directory
        let good = file(dir, "good.csv", generatedCSV(2500))
        var run = try profilectl(["import", good] + server.flags)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("read 2500, written 2500, rejected 0"))

        let mixed = file(dir, "mixed.jsonl", """
            {"userId":"a","name":"A","portraitUri":"ua"}
            {"userId":"b","name":"B"}
            {"userId":"c","name":"C","portraitUri":"uc"}

            """)
        run = try profilectl(["import", mixed] + server.flags)
        #expect(run.status == 1)
        #expect(run.stderr.contains("\(mixed):2: no portraitUri field"))
        #expect(run.stderr.contains("read 3, written 2, rejected 1"))
        #expect(try server.connect().count() == 2502)

        run = try profilectl(["import", dir + "/missing.csv"] + server.flags)
        #expect(run.status == 2)
        #expect(run.stderr.contains("cannot open \(dir)/missing.csv"))
        let badHeader = file(dir, "header.csv", "userId,name,name\n1,a,b\n")
        run = try profilectl(["import", badHeader] + server.flags)
        #expect(run.status == 2)
        #expect(run.stderr.contains("\(badHeader):1: the header names 'name' twice"))
        run = try profilectl(["import", good, "--port", "1"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("cannot connect"))
    }

    @Test func badFlagsAreOneUsageLineAndExit64() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let unnamedFormat = file(directory, "profiles.txt", "userId,name,portraitUri\n")
        for args in [["import"], ["import", unnamedFormat], ["import", "-"], ["import", "a.csv", "--batch", "0"],
                     ["import", "a.csv", "--frob"], ["get"], ["set", "1", "2"], ["recent", "0"], ["frob"],
                     ["scan", "--limit", "1001"], ["update", "1"], ["count", "--port", "http"],
                     ["import", "x.csv", "--db", "--strict"], ["get", "--host", "--json", "1"],
                     ["ping", "--unix", "/run/p.sock", "--port", "7711"], ["import", "a.csv", "--db", "s.db", "--token", "t"],
                     ["export", "--host", "h", "--db", "s.db"], ["get", "1", "--cacert", "ca.crt"], ["ping", "--insecure"],
                     ["ping", "--tls", "--unix", "/run/p.sock"], ["ping", "--tls", "--cert", "c.crt"],
                     ["ping", "--tls", "--key", "c.key"], ["export", "--db", "s.db", "--tls"], ["ping", "--tls=yes"],
                     ["ping", "--tls", "--sni"]] {
            let run = try profilectl(args)
            #expect(run.status == 64, "\(args)")
            #expect(run.stderr.split(separator: "\n").count == 1, "\(args): \(run.stderr)")
            #expect(run.stderr.contains("usage: profilectl"), "\(args)")
        }
        // A flag given without its value does not take the next flag as one.
        let swallowed = try profilectl(["import", "x.csv", "--db", "--strict"])
        #expect(swallowed.stderr.hasPrefix("profilectl: --db needs a value, not the flag --strict"), "\(swallowed.stderr)")
        #expect(try profilectl(["export", "--db", "s.db", "--unix", "/run/p.sock"]).stderr
            .hasPrefix("profilectl: --db opens the store file without a server, so --unix has no use with it"))
        // Every command's usage line names the connection flags, which every command takes.
        for command in ["import", "export", "get", "set", "update", "del", "exists", "count", "recent", "scan",
                        "stats", "ping", "flushall"] {
            let run = try profilectl([command, "--unix", "/run/p.sock", "--port", "7711"])
            #expect(run.status == 64, "\(command)")
            #expect(run.stderr.hasSuffix(" [--host HOST] [--port PORT | --unix PATH] [--token TOKEN] "
                                         + "[--tls [--cacert FILE] [--cert FILE --key FILE] [--sni NAME] [--insecure]]\n"),
                    "\(command): \(run.stderr)")
        }
        #expect(try profilectl(["get", "42", "--unix", "/run/p.sock", "--port", "7711"]).stderr
                == "profilectl: --unix connects to a socket, so --port has no use with it; usage: profilectl get ID... [--json] "
                + "[--host HOST] [--port PORT | --unix PATH] [--token TOKEN] "
                + "[--tls [--cacert FILE] [--cert FILE --key FILE] [--sni NAME] [--insecure]]\n")
        #expect(try profilectl(["ping", "--cacert", "ca.crt"]).stderr.hasPrefix("profilectl: --cacert sets up TLS: add --tls;"))
        #expect(try profilectl(["ping", "--tls", "--unix", "/run/p.sock"]).stderr
            .hasPrefix("profilectl: --tls connects over TCP, so --unix has no use with it;"))
        #expect(try profilectl(["ping", "--tls", "--cert", "c.crt"]).stderr
            .hasPrefix("profilectl: a client certificate needs both --cert and --key;"))
        // A file that is not there is named as such, whatever its extension.
        let missing = try profilectl(["import", "no-such-file.txt"])
        #expect(missing.status == 2)
        #expect(missing.stderr == "profilectl: cannot open no-such-file.txt: No such file or directory\n", "\(missing.stderr)")
        let help = try profilectl(["help", "import"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("usage: profilectl import FILE..."))
        #expect(try profilectl(["scan", "--help"]).stdout.contains("--after ID"))
    }

    @Test func strictStopsAtTheFirstBadRowWritingNothingOfItsBatch() throws {
        let server = try TestServer()
        // Batches of 100: rows u0...u99 go in; the bad row sits in the second batch.
        let text = generatedCSV(150) + "bad-row-without-fields\n" + generatedCSV(10, from: 1000).dropFirst(24)
        let path = file(server.directory, "strict.csv", text)
        let run = try profilectl(["import", path, "--strict", "--batch", "100"] + server.flags)
        #expect(run.status == 1)
        #expect(run.stderr.contains("\(path):152: missing field"))
        #expect(run.stderr.contains("read 151, written 100, rejected 1"))
        let c = try server.connect()
        #expect(try c.count() == 100)
        #expect(try c.exists(Array("u99".utf8)))
        #expect(try !c.exists(Array("u100".utf8)))

        let store = server.directory + "/offline.sqlite3"
        let offline = try profilectl(["import", path, "--strict", "--batch", "100", "--db", store])
        #expect(offline.status == 1)
        #expect(try profilectl(["export", "--db", store]).stdout.split(separator: "\n").count == 100)
    }

    @Test func offlineImportIsRefusedWhileAServerHoldsTheFile() throws {
        let server = try TestServer()
        try server.connect().set(.init(userId: "keep", name: "me", portraitUri: "u"))
        let path = file(server.directory, "a.csv", generatedCSV(10))
        let run = try profilectl(["import", path, "--db", server.databasePath])
        #expect(run.status == 2)
        #expect(run.stderr.contains("\(server.databasePath) is in use by a running profiled"))
        // The server's own checkpoints rewrite the file's bytes, so the check is by content.
        let c = try server.connect()
        #expect(try c.count() == 1)
        #expect(try c.get(Array("keep".utf8))?.name == Array("me".utf8))
        for i in 0..<10 { #expect(try !c.exists(Array("u\(i)".utf8))) }
        server.stop()
        let reopened = try TestServer([], directory: server.directory)
        #expect(try reopened.connect().count() == 1)
    }

    @Test func onlineAndOfflineImportsGiveTheSameStoreAndReRunsAreHarmless() throws {
        let server = try TestServer()
        let dir = server.directory
        let csv = file(dir, "a.csv", generatedCSV(3000) + awkwardCSV.split(separator: "\n", maxSplits: 1)[1])
        let jsonl = file(dir, "b.jsonl", #"{"userId":"u7","name":"replaced","portraitUri":"x","extra":[1]}"# + "\n")
        for _ in 0..<2 {
            #expect(try profilectl(["import", csv, jsonl] + server.flags).status == 0)
        }
        let store = dir + "/offline.sqlite3"
        for _ in 0..<2 {
            #expect(try profilectl(["import", csv, jsonl, "--db", store]).status == 0)
        }
        let online = try profilectl(["export"] + server.flags)
        let offline = try profilectl(["export", "--db", store])
        #expect(online.status == 0 && offline.status == 0)
        #expect(online.stdout.split(separator: "\n").count == 3007)
        #expect(online.stdout == offline.stdout)
        #expect(online.stdout.contains(#"{"userId":"u7","name":"replaced","portraitUri":"x"}"#))
        // The write sequence matches too: the newest profile is the last one imported.
        #expect(try profilectl(["recent", "1"] + server.flags).stdout == "u7  replaced  x\n")
    }

    @Test func aServerWithAShorterLineLimitIsNamedAndMetWithMaxLine() throws {
        let server = try TestServer(["--max-line", "1024"])
        let path = file(server.directory, "a.csv", generatedCSV(3000))
        var run = try profilectl(["import", path] + server.flags)
        #expect(run.status == 2)
        #expect(run.stderr.contains("profilectl: ERROR TOOLONG "), "\(run.stderr)")
        #expect(run.stderr.contains("give import the server's --max-line with --max-line BYTES"), "\(run.stderr)")
        #expect(try server.connect().count() == 0)

        // Each MSET line stays within the limit; a row that cannot fit in one is a bad row.
        let long = "big,\(String(repeating: "n", count: 256)),https://cdn.example/\(String(repeating: "p", count: 1000))\n"
        let mixed = file(server.directory, "b.csv", generatedCSV(3000) + long)
        run = try profilectl(["import", mixed, "--max-line", "1024"] + server.flags)
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("\(mixed):3002: the row needs 1287 bytes as an MSET line, over --max-line 1024"),
                "\(run.stderr)")
        #expect(run.stderr.contains("read 3001, written 3000, rejected 1"), "\(run.stderr)")
        #expect(try server.connect().count() == 3000)

        run = try profilectl(["import", path, "--max-line", "1024", "--db", server.directory + "/offline.sqlite3"])
        #expect(run.status == 64)
        #expect(run.stderr.contains("--max-line is the server's line limit, so it has no use with --db"))
    }

    @Test func anEmptyImportSaysSo() throws {
        let server = try TestServer()
        let path = file(server.directory, "empty.csv", "userId,name,portraitUri\n")
        let run = try profilectl(["import", path] + server.flags)
        #expect(run.status == 0)
        #expect(run.stderr.contains("no rows to import"))
        #expect(run.stderr.contains("read 0, written 0, rejected 0"))
    }
}
