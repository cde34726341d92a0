import Testing
@testable import ProfileCache

@Suite struct LookupTests {
    @Test func emptyCacheMisses() {
        let cache = ProfileCache(limitBytes: 1 << 20)
        #expect(cache.seen("42") == .miss)
        #expect(cache.statistics == CacheStatistics(limitBytes: 1 << 20))
    }

    @Test func filledReplyIsReturnedByteForByte() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let ticket = try #require(cache.missTicket("42"))
        cache.fill("42", replyLine("42"), ticket)
        #expect(cache.seen("42") == .hit(replyLine("42")))
        #expect(cache.seen("43") == .miss)
        #expect(cache.seen("4") == .miss)
        #expect(cache.seen("420") == .miss)
    }

    @Test func filledAbsenceIsRemembered() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let ticket = try #require(cache.missTicket("7"))
        cache.fill("7", nil, ticket)
        #expect(cache.seen("7") == .absent)
        #expect(cache.statistics.items == 1)
        #expect(cache.statistics.absentItems == 1)
    }

    @Test func storeSetsProfilesAndAbsences() {
        let cache = ProfileCache(limitBytes: 1 << 20)
        cache.store("42", replyLine("42"))
        cache.store("7", nil)
        #expect(cache.seen("42") == .hit(replyLine("42")))
        #expect(cache.seen("7") == .absent)
        cache.store("42", nil)
        cache.store("7", replyLine("7", name: "Li"))
        #expect(cache.seen("42") == .absent)
        #expect(cache.seen("7") == .hit(replyLine("7", name: "Li")))
        #expect(cache.statistics.items == 2)
        #expect(cache.statistics.absentItems == 1)
        #expect(cache.integrityViolations() == [])
    }

    @Test func copyingLookupCopiesAHitOnlyWhenItFits() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        cache.store("42", replyLine("42"))
        cache.store("7", nil)
        let reply = Array(replyLine("42").utf8)
        var room = [UInt8](repeating: 0, count: reply.count)

        func copy(_ id: String, room count: Int) -> CacheCopy {
            Array(id.utf8).withUnsafeBytes { key in
                room.withUnsafeMutableBytes { cache.lookup(key, copyingReplyInto: UnsafeMutableRawBufferPointer(rebasing: $0[..<count])) }
            }
        }

        guard case .hit(let tooSmall) = copy("42", room: reply.count - 1) else { return #expect(Bool(false), "no hit") }
        #expect(tooSmall == reply.count)
        #expect(room.allSatisfy { $0 == 0 }, "copied into a room too small")
        guard case .hit(let exact) = copy("42", room: reply.count) else { return #expect(Bool(false), "no hit") }
        #expect(exact == reply.count)
        #expect(room == reply)
        guard case .hit = copy("42", room: 0) else { return #expect(Bool(false), "no hit without room") }
        guard case .absent = copy("7", room: reply.count) else { return #expect(Bool(false), "absence not seen") }
        guard case .miss(let ticket) = copy("43", room: reply.count) else { return #expect(Bool(false), "no miss") }
        cache.fill("43", replyLine("43"), ticket)
        #expect(cache.seen("43") == .hit(replyLine("43")))
        #expect(cache.integrityViolations() == [])
    }

    @Test(arguments: [
        ("a b", #""a b""#),
        (#"a"b"#, #""a\"b""#),
        (#"back\slash"#, #""back\\slash""#),
        ("tab\there", #""tab\there""#),
        ("小明", "小明"),
        ("é", "é"),
    ])
    func idsAreFoundByTheirRawBytesHoweverEncoded(id: String, encodedId: String) {
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        cache.store(id, replyLine(encodedId))
        // A neighbour sharing the encoded form's bytes must not be confused with the id.
        cache.store(encodedId + "x", replyLine(encodedId + "x"))
        #expect(cache.seen(id) == .hit(replyLine(encodedId)))
        #expect(cache.seen(encodedId + "x") == .hit(replyLine(encodedId + "x")))
        if encodedId != id {
            #expect(cache.seen(encodedId) == .miss)
        }
        #expect(cache.integrityViolations() == [])
    }

    @Test func bareIdsAreStoredOnceQuotedIdsAlongsideTheReply() throws {
        let bare = Array("小明".utf8)
        let quoted = Array("a b".utf8)
        var slab = BlockSlab(pool: PagePool())
        let bareBlock = try #require(bare.withUnsafeBytes { key in
            Array(replyLine("小明").utf8).withUnsafeBytes { EntryBlock.makeProfile(key: key, reply: $0, in: &slab) }
        })
        let quotedBlock = try #require(quoted.withUnsafeBytes { key in
            Array(replyLine(#""a b""#).utf8).withUnsafeBytes { EntryBlock.makeProfile(key: key, reply: $0, in: &slab) }
        })
        #expect(bareBlock.kind == .profileWithIdInReply)
        #expect(quotedBlock.kind == .profileWithIdAfterReply)
        #expect(Array(bareBlock.key) == bare)
        #expect(Array(quotedBlock.key) == quoted)
        #expect(bareBlock.byteCount == EntryBlock.headerSize + replyLine("小明").utf8.count)
        #expect(quotedBlock.byteCount == EntryBlock.headerSize + replyLine(#""a b""#).utf8.count + quoted.count)
    }

    @Test func idsOfEveryLengthUpTo128AreDistinguished() {
        let cache = ProfileCache(limitBytes: 1 << 22, shardCount: 4)
        let ids = (1...128).map { String(repeating: "k", count: $0) }
        for id in ids {
            cache.store(id, replyLine(id))
        }
        for id in ids {
            #expect(cache.seen(id) == .hit(replyLine(id)))
        }
        // Same length, differing only in the last byte or the first.
        #expect(cache.seen(String(repeating: "k", count: 99) + "j") == .miss)
        #expect(cache.seen("j" + String(repeating: "k", count: 99)) == .miss)
        #expect(cache.integrityViolations() == [])
    }

    @Test func idsTheCacheCannotHoldAlwaysMiss() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        let long = String(repeating: "x", count: 256)
        cache.store(long, replyLine(long))
        #expect(cache.seen(long) == .miss)
        let ticket = try #require(cache.missTicket(""))
        cache.fill("", nil, ticket)
        #expect(cache.seen("") == .miss)
        #expect(cache.statistics.items == 0)
    }
}
