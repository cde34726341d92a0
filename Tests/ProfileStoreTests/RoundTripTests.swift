import Testing
@testable import ProfileStore

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

    @Test func updateChangesOnlyTheGivenFields() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("42", "Fran", "a.png"))

        #expect(try writer.update("42", name: "Fran Li", portraitUri: nil) == Profile("42", "Fran Li", "a.png"))
        #expect(try writer.update("42", name: nil, portraitUri: "b.png") == Profile("42", "Fran Li", "b.png"))
        #expect(try writer.update("42", name: "", portraitUri: "") == Profile("42", "", ""))
        #expect(try reader.get("42") == Profile("42", "", ""))
    }

    @Test func updateOfAMissingProfileChangesNothing() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("1", "one", ""))

        var calls = 0
        try withBytes("2") { id in
            try writer.update(userId: id, name: nil, portraitUri: nil) { row in
                calls += 1
                #expect(row == nil)
            }
        }
        #expect(calls == 1)
        #expect(try reader.get("2") == nil)
        #expect(try reader.count() == 1)
        #expect(try reader.recent(10) == ["1"])
    }

    @Test func deleteRemovesOneProfileAndSaysWhetherItExisted() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("1", "one", ""))
        try writer.upsert(Profile("2", "two", ""))

        #expect(try writer.delete("1"))
        #expect(try !writer.delete("1"))
        #expect(try reader.get("1") == nil)
        #expect(try reader.get("2") == Profile("2", "two", ""))
        #expect(try reader.count() == 1)
    }

    @Test func deleteAllEmptiesTheStore() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.transaction {
            for index in 0..<50 { try writer.upsert(Profile("id\(index)", "n", "u")) }
        }
        #expect(try reader.count() == 50)
        try writer.deleteAll()
        #expect(try reader.count() == 0)
        #expect(try reader.recent(10) == [])
        try writer.upsert(Profile("new", "n", "u"))
        #expect(try reader.recent(10) == ["new"])
    }

    @Test(arguments: ["' OR '1'='1", "\"; DROP TABLE profiles; --", "'); DELETE FROM profiles; --", "?1", "%"])
    func injectionLookingTextIsPlainData(_ text: String) throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("plain", "plain", "plain"))
        try writer.upsert(Profile(text, text, text))

        #expect(try reader.get(text) == Profile(text, text, text))
        #expect(try reader.get("x" + text) == nil)
        #expect(try reader.count() == 2)
        #expect(try writer.update(text, name: text + text, portraitUri: nil) == Profile(text, text + text, text))
        #expect(try reader.scan(after: text, limit: 10) == (text < "plain" ? ["plain"] : []))
        #expect(try writer.delete(text))
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
