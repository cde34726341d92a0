import Testing
@testable import ProfileCache

@Suite struct FillTicketTests {
    @Test func aFillIsDroppedWhenAStoreTouchedTheShardSinceItsTicket() throws {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        let stale = try #require(cache.missTicket("42"))
        cache.store("other", replyLine("other"))
        cache.fill("42", replyLine("42", name: "Old"), stale)
        #expect(cache.seen("42") == .miss)

        let fresh = try #require(cache.missTicket("42"))
        cache.fill("42", replyLine("42", name: "New"), fresh)
        #expect(cache.seen("42") == .hit(replyLine("42", name: "New")))
    }

    @Test func aSlowReaderCannotPutBackAValueOlderThanAStore() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let ticket = try #require(cache.missTicket("42"))
        // The reader read the old row; meanwhile the write committed and was stored.
        cache.store("42", replyLine("42", name: "New"))
        cache.fill("42", replyLine("42", name: "Old"), ticket)
        #expect(cache.seen("42") == .hit(replyLine("42", name: "New")))
    }

    @Test func aStaleAbsenceCannotHideANewProfile() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let ticket = try #require(cache.missTicket("42"))
        cache.store("42", replyLine("42"))
        cache.removeAll()
        cache.fill("42", nil, ticket)
        #expect(cache.seen("42") == .miss)
    }

    @Test func removeAllInvalidatesOutstandingTickets() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let ticket = try #require(cache.missTicket("42"))
        cache.removeAll()
        cache.fill("42", replyLine("42"), ticket)
        #expect(cache.seen("42") == .miss)
    }

    @Test func aFillDoesNotReplaceWhatIsAlreadyCached() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let first = try #require(cache.missTicket("42"))
        let second = try #require(cache.missTicket("42"))
        cache.fill("42", replyLine("42", name: "First"), first)
        cache.fill("42", nil, second)
        #expect(cache.seen("42") == .hit(replyLine("42", name: "First")))
        #expect(cache.statistics.items == 1)
    }
}
