import ProfileStore
@testable import ProfileStoreSQLite
import Testing

@Suite struct RecentTests {
    let directory = TemporaryDirectory()

    @Test func newestFirstAcrossAndWithinTransactions() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("a", "", ""))
        try writer.transaction {
            try writer.upsert(Profile("b", "", ""))
            try writer.upsert(Profile("c", "", ""))
            try writer.upsert(Profile("d", "", ""))
        }
        #expect(try reader.recent(10) == ["d", "c", "b", "a"])
        #expect(try reader.recent(2) == ["d", "c"])
        #expect(try reader.recent(0) == [])
        #expect(try reader.recent(-1) == [])
    }

    @Test func rewritingMakesAProfileNewest() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        for id in ["a", "b", "c"] { try writer.upsert(Profile(id, "", "")) }

        try writer.upsert(Profile("a", "again", ""))
        #expect(try reader.recent(10) == ["a", "c", "b"])
        try writer.upsert([Profile("b", "", ""), Profile("c", "", ""), Profile("b", "again", "")])
        #expect(try reader.recent(10) == ["b", "c", "a"])
    }

    /// Changes and removals go through the write path: readers see the new order before it is
    /// merged, and the table keeps it after.
    @Test func updatingMakesAProfileNewestAndDeletedProfilesAreNotShown() throws {
        let path = directory.file("profiles.sqlite3")
        let store = try openStore(path)
        try store.makeWriter().upsert(["a", "b", "c", "d"].map { Profile($0, "", "") })
        let reader = try store.makeReader()
        let writes = try store.openWritePath()

        try writes.commit(TestUnit(.patch("b", name: .set("changed"), portraitUri: .keep,
                                          createsMissing: false, removesEmptied: false)))
        #expect(try reader.recent(10) == ["b", "d", "c", "a"])
        try writes.commit(TestUnit(.patch("missing", name: .set("x"), portraitUri: .keep,
                                          createsMissing: false, removesEmptied: false)))
        #expect(try reader.recent(10) == ["b", "d", "c", "a"])
        try writes.commit(TestUnit([.remove("d"), .remove("a")]))
        #expect(try reader.recent(10) == ["b", "c"])
        try writes.commit(TestUnit(.put("e", "", "")))
        #expect(try reader.recent(10) == ["e", "b", "c"])
        try writes.close()
        #expect(tableRows(path).count == 3)
        #expect(try reader.recent(10) == ["e", "b", "c"])
    }

    @Test func orderSurvivesReopening() throws {
        let path = directory.file("profiles.sqlite3")
        do {
            let writer = try openStore(path).makeWriter()
            for id in ["c", "a", "b"] { try writer.upsert(Profile(id, "", "")) }
        }
        let store = try openStore(path)
        let writer = try store.makeWriter()
        try writer.upsert(Profile("0", "", ""))
        try writer.upsert(Profile("c", "", ""))
        #expect(try store.makeReader().recent(10) == ["c", "0", "b", "a"])
    }
}

@Suite struct ScanTests {
    let directory = TemporaryDirectory()

    /// Ids whose byte order differs from a naive character order: upper before
    /// lower case, prefixes first, multi-byte UTF-8 after ASCII, 中 (E4) after é (C3).
    let ids = ["b", "a", "aa", "A", "~", "é", "中", "中文", "z", "0", "a b", "ab"]

    var idsInByteOrder: [String] {
        ids.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }

    @Test func emptyAfterStartsAtTheBeginning() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.transaction { for id in ids { try writer.upsert(Profile(id, "n", "u")) } }
        let reader = try store.makeReader()
        #expect(try reader.scan(after: "", limit: 100) == idsInByteOrder)
        #expect(idsInByteOrder.prefix(4) == ["0", "A", "a", "a b"])
        #expect(idsInByteOrder.suffix(3) == ["é", "中", "中文"])
    }

    @Test func pagingVisitsEveryIdOnceInByteOrder() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.transaction { for id in ids { try writer.upsert(Profile(id, "n", "u")) } }
        let reader = try store.makeReader()

        var seen: [String] = []
        var after = ""
        while true {
            let page = try reader.scan(after: after, limit: 5)
            seen += page
            guard page.count == 5, let last = page.last else { break }
            after = last
        }
        #expect(seen == idsInByteOrder)
    }

    @Test func afterNeedNotBeAStoredId() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.transaction { for id in ids { try writer.upsert(Profile(id, "n", "u")) } }
        let reader = try store.makeReader()
        #expect(try reader.scan(after: "a", limit: 3) == ["a b", "aa", "ab"])
        #expect(try reader.scan(after: "zz", limit: 3) == ["~", "é", "中"])
        #expect(try reader.scan(after: "中文", limit: 3) == [])
        #expect(try reader.scan(after: "", limit: 0) == [])
        #expect(try reader.scan(after: "", limit: -1) == [])
    }
}
