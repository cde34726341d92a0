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
}
