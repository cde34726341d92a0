import ProfileStore
@testable import ProfileStoreSQLite
import Testing

@Suite struct RoundTripTests {
    let directory = TemporaryDirectory()

    @Test func upsertThenLookupReturnsTheProfile() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.transaction {
            try writer.upsert(Profile("42", "Fran Li", "https://cdn.example/p/42.png"))
            try writer.upsert(Profile("7", "小明", ""))
        }
        #expect(try reader.get("42") == Profile("42", "Fran Li", "https://cdn.example/p/42.png"))
        #expect(try reader.get("7") == Profile("7", "小明", ""))
        #expect(try reader.get("8") == nil)
        #expect(try reader.count() == 2)
    }

    @Test func upsertReplacesAnExistingProfile() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.upsert(Profile("42", "old", "old.png"))
        try writer.upsert(Profile("42", "new", ""))
        let reader = try store.makeReader()
        #expect(try reader.get("42") == Profile("42", "new", ""))
        #expect(try reader.count() == 1)
    }

    @Test(arguments: ["' OR '1'='1", "\"; DROP TABLE profiles; --", "'); DELETE FROM profiles; --", "?1", "%"])
    func injectionLookingTextIsPlainData(_ text: String) throws {
        let path = directory.file("profiles.sqlite3")
        let store = try openStore(path)
        let reader = try store.makeReader()
        try store.makeWriter().upsert([Profile("plain", "plain", "plain"), Profile(text, text, text)])

        #expect(try reader.get(text) == Profile(text, text, text))
        #expect(try reader.get("x" + text) == nil)
        #expect(try reader.count() == 2)
        #expect(try reader.scan(after: text, limit: 10) == (text < "plain" ? ["plain"] : []))

        // Changes and removals reach the table through the write path's merges.
        let writes = try store.openWritePath()
        try writes.commit(TestUnit(.patch(text, name: .set(text + text), portraitUri: .keep,
                                          createsMissing: false, removesEmptied: false)))
        #expect(eventually { tableRows(path) == ["plain": "plain", text: text + text] })
        #expect(try reader.get(text) == Profile(text, text + text, text))
        try writes.commit(TestUnit(.remove(text)))
        try writes.close()
        #expect(tableRows(path) == ["plain": "plain"])
        #expect(try reader.get(text) == nil)
        #expect(try reader.get("plain") == Profile("plain", "plain", "plain"))
    }

    @Test func dataSurvivesReopening() throws {
        let path = directory.file("profiles.sqlite3")
        do {
            let store = try openStore(path)
            try store.makeWriter().upsert(Profile("42", "Fran Li", "p.png"))
        }
        let store = try openStore(path)
        #expect(try store.makeReader().get("42") == Profile("42", "Fran Li", "p.png"))
    }
}
