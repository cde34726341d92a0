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

    /// The cache keeps a reply and finds the id and values wherever the caller's views point:
    /// inside the reply they cost nothing more; elsewhere (a value the reply escaped) they are
    /// copied after it. Either way they read back byte for byte.
    @Test func valuesTheReplyCarriesAreStoredOnceOthersAfterIt() throws {
        var slab = BlockSlab(pool: PagePool())
        let reply = Array((#"VALUE 小明 "Fran Li" "a\"b""# + "\n").utf8)
        let key = Array("小明".utf8), name = Array("Fran Li".utf8), uri = Array(#"a"b"#.utf8)
        let block = try #require(key.withUnsafeBytes { key in
            reply.withUnsafeBytes { reply in
                uri.withUnsafeBytes { uri in
                    // The id and the name are in the reply; the portraitUri, escaped there, is not.
                    let id = UnsafeRawBufferPointer(rebasing: reply[6..<12])
                    let name = UnsafeRawBufferPointer(rebasing: reply[14..<21])
                    return EntryBlock.makeProfile(key: key, profile: EncodedProfile(reply: reply, userIdInReply: id, name: name,
                                                                                    portraitUri: uri),
                                                  in: &slab)
                }
            }
        })
        #expect(Array(block.reply) == reply)
        #expect(Array(block.key) == key)
        #expect(Array(block.profile.userId) == key)
        #expect(Array(block.profile.values.name) == name)
        #expect(Array(block.profile.values.portraitUri) == uri)
        // The header, the reply, a byte for each location, then the value the reply lacks.
        #expect(block.byteCount == EntryBlock.headerSize + reply.count + EntryBlock.locationCount + uri.count)
        // An id the reply does not carry (here: one it was not told of) is copied too.
        let other = try #require(Array("k".utf8).withUnsafeBytes { key in
            reply.withUnsafeBytes { reply in
                EntryBlock.makeProfile(key: key, profile: EncodedProfile(reply: reply, name: UnsafeRawBufferPointer(rebasing: reply[14..<21]),
                                                                         portraitUri: UnsafeRawBufferPointer(rebasing: reply[14..<14])),
                                       in: &slab)
            }
        })
        #expect(Array(other.key) == Array("k".utf8))
        #expect(other.profile.values.portraitUri.count == 0)
        #expect(other.byteCount == EntryBlock.headerSize + reply.count + EntryBlock.locationCount + 1)
    }

    /// Where a location does not fit in a byte (a portraitUri past 255 bytes, or anything
    /// beyond that far into the block), every location takes two; the values read back the same.
    @Test(arguments: [10, 200, 255, 256, 300, 2000])
    func longValuesTakeTwoByteLocations(uriLength: Int) throws {
        let uri = String(repeating: "u", count: uriLength)
        let line = replyLine("someone", name: "Fran", uri: uri)
        let cache = ProfileCache(limitBytes: 1 << 20, shardCount: 1)
        cache.store("someone", line)
        #expect(cache.seen("someone") == .hit(line))
        let values: [String]? = Array("someone".utf8).withUnsafeBytes { key in
            cache.lookup(key) { outcome in
                guard case .hit(let profile) = outcome else { return nil }
                return [profile.userId, profile.values.name, profile.values.portraitUri].map { String(decoding: $0, as: UTF8.self) }
            }
        }
        #expect(values == ["someone", "Fran", uri])
        // Rewritten in place, or moved to a block of the other width: still the same values.
        cache.update("someone", replyLine("someone", name: "Fran", uri: String(uri.dropLast())))
        #expect(cache.seen("someone") == .hit(replyLine("someone", name: "Fran", uri: String(uri.dropLast()))))
        #expect(cache.integrityViolations() == [])
    }

    @Test func aHitShowsTheProfilesValues() throws {
        let cache = ProfileCache(limitBytes: 1 << 20)
        cache.store("42", replyLine("42", name: "Fran", uri: "https://cdn.example/42.png"))
        let values: [String]? = Array("42".utf8).withUnsafeBytes { key in
            cache.lookup(key) { outcome in
                guard case .hit(let profile) = outcome else { return nil }
                return [profile.userId, profile.values.name, profile.values.portraitUri].map { String(decoding: $0, as: UTF8.self) }
            }
        }
        #expect(values == ["42", "Fran", "https://cdn.example/42.png"])
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
