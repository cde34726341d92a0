import ProfileTestSupport
import ProfileAdmin
import Testing

@Suite struct CSVParserTests {
    @Test func headerInAnyOrderWithOtherColumnsIgnored() throws {
        let rows = try parseEverywhere("portraitUri,extra,userId,name\nhttps://a/1.png,x,1,Ann\nu2,,2,Bo\n", .csv)
        #expect(rows == [.row(2, "1", "Ann", "https://a/1.png"), .row(3, "2", "Bo", "u2")])
    }

    @Test func byteOrderMarkCRLFAndMissingFinalLineBreak() throws {
        let text = [0xEF, 0xBB, 0xBF] + Array("userId,name,portraitUri\r\n1,Ann,u1\r\n\r\n2,\"Bo\",u2\r\n3,Cy,".utf8)
        let rows = try parseEverywhere(text, .csv)
        #expect(rows == [.row(2, "1", "Ann", "u1"), .row(4, "2", "Bo", "u2"), .row(5, "3", "Cy", "")])
    }

    @Test func quotedFieldsHoldCommasQuotesAndLineBreaks() throws {
        let text = "userId,name,portraitUri\n\"1\",\"Li, \"\"Fran\"\"\",\"a\nb\r\nc\"\n2,小明 😀,\"\"\n3,\"\ttab\",u\n"
        let rows = try parseEverywhere(text, .csv)
        #expect(rows == [
            .row(2, "1", "Li, \"Fran\"", "a\nb\r\nc"),
            .row(5, "2", "小明 😀", ""),
            .row(6, "3", "\ttab", "u"),
        ])
    }

    @Test func everyBadRowKindWithTheLineItStartsOn() throws {
        let long = String(repeating: "n", count: 257)
        let text = "userId,name,portraitUri\n"
            + "1,only-two\n"                     // 2
            + "2,a,b,c\n"                        // 3
            + ",empty,u\n"                       // 4
            + "4,\(long),u\n"                    // 5
            + "5,bro\"ken,u\n"                   // 6
            + "6,\"closed\"x,u\n"                // 7
            + "7,\"multi\nline\",u,extra\n"      // 8 (9)
            + "userId,name,portraitUri\n"        // 10
            + "8,ok,u\n"                         // 11
            + "9,\"never closed,u\n10,x,y\n"     // 12
        let rows = try parseEverywhere(text, .csv)
        #expect(rows == [
            .bad(2, "missing field: 2 fields where the header has 3"),
            .bad(3, "extra field: 4 fields where the header has 3"),
            .bad(4, "userId is empty"),
            .bad(5, "name is 257 bytes, over its limit of 256"),
            .bad(6, "a quote inside an unquoted field"),
            .bad(7, "text after a closing quote"),
            .bad(8, "extra field: 4 fields where the header has 3"),
            .bad(10, "the header row again"),
            .row(11, "8", "ok", "u"),
            .bad(12, "a quoted field is not closed before the end of the file"),
        ])
    }

    @Test func invalidUTF8AndNULAreBadRows() throws {
        let text = Array("userId,name,portraitUri\n1,".utf8) + [0xC3, 0x28] + Array(",u\n2,a,\"x".utf8) + [0]
            + Array("\"\n3,b,u\n".utf8)
        let rows = try parseEverywhere(text, .csv)
        #expect(rows == [
            .bad(2, "name is not valid UTF-8"),
            .bad(3, "portraitUri holds a NUL byte"),
            .row(4, "3", "b", "u"),
        ])
    }

    @Test func limitsAreExactlyTheProtocols() throws {
        let id128 = String(repeating: "i", count: 128)
        let uri = String(repeating: "u", count: 2048)
        let text = "userId,name,portraitUri\n\(id128),\(String(repeating: "n", count: 256)),\(uri)\n"
            + "\(id128)i,n,u\n1,n,\(uri)u\n"
        let rows = try parseEverywhere(text, .csv)
        #expect(rows.count == 3)
        #expect(rows[1] == .bad(3, "userId is 129 bytes, over its limit of 128"))
        #expect(rows[2] == .bad(4, "portraitUri is 2049 bytes, over its limit of 2048"))
    }

    @Test func badHeadersStopTheFile() throws {
        for (text, reason) in [
            ("userId,name,name,portraitUri\n1,a,b,c\n", "the header names 'name' twice"),
            ("userId,name\n1,a\n", "the header has no portraitUri column"),
        ] {
            #expect(throws: FormatError(line: 1, reason: reason)) { try parseAll(Array(text.utf8), .csv, chunkSize: 3) }
        }
    }

    @Test func emptyInputAndHeaderOnlyGiveNoRows() throws {
        #expect(try parseEverywhere("", .csv) == [])
        #expect(try parseEverywhere("userId,name,portraitUri\n", .csv) == [])
    }
}
