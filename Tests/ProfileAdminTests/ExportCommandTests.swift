import ProfileTestSupport
import Glibc
import Testing

@Suite struct ExportCommandTests {
    @Test(arguments: ["csv", "jsonl"])
    func exportThenImportGivesBackTheSameProfiles(format: String) throws {
        let first = try TestServer()
        let source = file(first.directory, "awkward.csv", awkwardCSV)
        let imported = try profilectl(["import", source] + first.flags)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try first.connect().count() == 7)

        let exported = first.directory + "/export." + format
        #expect(try profilectl(["export", "--format", format, "-o", exported] + first.flags).status == 0)
        let second = try TestServer()
        let again = try profilectl(["import", exported] + second.flags)
        #expect(again.status == 0, "\(again.stderr)")

        let a = try first.connect().scan(after: [], limit: 1000)
        let b = try second.connect().scan(after: [], limit: 1000)
        #expect(a.count == 7)
        #expect(a == b)
        #expect(a.contains { $0.name == Array("back\\slash \"and\" cr\r".utf8) && $0.portraitUri.isEmpty })
        #expect(a.contains { $0.name == Array("two\nlines".utf8) })
        #expect(a.contains { $0.name == Array("小明".utf8) })
    }

    @Test func exportPagesThroughMoreThanOneScanPage() throws {
        let server = try TestServer()
        let path = file(server.directory, "a.csv", generatedCSV(2345))
        #expect(try profilectl(["import", path] + server.flags).status == 0)
        let run = try profilectl(["export", "--format", "csv"] + server.flags)
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count == 2346)
        #expect(lines.first == "userId,name,portraitUri")
        #expect(Set(lines).count == 2346)
    }

    @Test func aFailedExportLeavesTheFileItReplacesAsItWas() throws {
        let server = try TestServer()
        let dir = server.directory
        let kept = file(dir, "kept.jsonl", "what was there before\n")
        chmod(kept, 0o600)
        server.stop()
        // The server is down, then the store is held by a running server: nothing to export.
        var run = try profilectl(["export", "-o", kept] + server.flags)
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("cannot connect"))
        try server.start()
        run = try profilectl(["export", "--db", server.databasePath, "-o", kept])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("is in use by a running profiled"))
        #expect(readText(kept) == "what was there before\n")
        #expect(directoryEntries(dir).allSatisfy { !$0.contains(".tmp-") }, "\(directoryEntries(dir))")

        // A successful one replaces it and keeps its mode.
        try server.connect().set(.init(userId: "a", name: "b", portraitUri: "c"))
        run = try profilectl(["export", "-o", kept] + server.flags)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(readText(kept) == #"{"userId":"a","name":"b","portraitUri":"c"}"# + "\n")
        var status = stat()
        stat(kept, &status)
        #expect(status.st_mode & 0o777 == 0o600)
        #expect(directoryEntries(dir).allSatisfy { !$0.contains(".tmp-") }, "\(directoryEntries(dir))")
    }

    @Test func anExportOverItsOwnStoreIsRefused() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let store = dir + "/e.db"
        let source = file(dir, "a.csv", generatedCSV(10))
        #expect(try profilectl(["import", source, "--db", store]).status == 0)
        symlink(store, dir + "/link.db")
        for output in [store, dir + "/./e.db", dir + "/link.db", store + "-wal", store + "-writes"] {
            let run = try profilectl(["export", "--db", store, "-o", output])
            #expect(run.status == 64, "\(output): \(run.stderr)")
            #expect(run.stderr.split(separator: "\n").count == 1, "\(output): \(run.stderr)")
            #expect(run.stderr.contains("names the store --db reads"), "\(output): \(run.stderr)")
        }
        let exported = try profilectl(["export", "--db", store])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.stdout.split(separator: "\n").count == 10)
        #expect(access(store + ".lock", F_OK) != 0, "the export left the store's lock file")
    }
}

/// The names in a directory, without `.` and `..`.
func directoryEntries(_ path: String) -> [String] {
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
}
