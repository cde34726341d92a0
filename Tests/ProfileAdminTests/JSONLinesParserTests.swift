import ProfileTestSupport
import ProfileAdmin
import Testing

@Suite struct JSONLinesParserTests {
    @Test func fieldsInAnyOrderOthersIgnoredEveryEscape() throws {
        let text = #"""
            {"name":"Ann","userId":"1","portraitUri":"u1","age":41,"tags":["a",{"b":[1.5e3,-0,true,null]}]}

            { "userId" : "2" , "name" : "\"q\" \\ \/ \b\f\n\r\t\u00e9\u4E2D\ud83d\ude00" , "portraitUri" : "" }
            {"userId":"3","name":"小明","portraitUri":"u3"}
            """# + "\r\n"
        let rows = try parseEverywhere(text, .jsonl)
        #expect(rows == [
            .row(1, "1", "Ann", "u1"),
            .row(3, "2", "\"q\" \\ / \u{8}\u{c}\n\r\té中😀", ""),
            .row(4, "3", "小明", "u3"),
        ])
    }

    @Test func everyBadLineKind() throws {
        let lines = [
            #"{"userId":"1","name":"a"}"#,                                  // 1 missing
            #"{"userId":"2","name":"a","portraitUri":"u","name":"b"}"#,     // 2 repeated
            #"{"userId":3,"name":"a","portraitUri":"u"}"#,                  // 3 not a string
            #"{"userId":"4","name":"a","portraitUri":"u""#,                 // 4 truncated
            #"["userId"]"#,                                                 // 5 not an object
            #"{"userId":"6","name":"a\x","portraitUri":"u"}"#,              // 6 bad escape
            #"{"userId":"7","name":"\ud800","portraitUri":"u"}"#,           // 7 lone surrogate
            #"{"userId":"8","name":"a","portraitUri":"u"} x"#,              // 8 trailing text
            #"{"userId":"9","name":"\u0000","portraitUri":"u"}"#,           // 9 NUL
            #"{"userId":"","name":"a","portraitUri":"u"}"#,                 // 10 empty id
            #"{"userId":"11","name":"a","portraitUri":"u","n":01}"#,        // 11 bad number
            #"{"userId":"12","name":"a","portraitUri":"u"}"#,               // 12 good
            "{\"userId\":\"13\",\"name\":\"a\tb\",\"portraitUri\":\"u\"}",  // 13 raw tab
        ]
        var bytes = Array(lines.joined(separator: "\n").utf8) + Array("\n".utf8)
        bytes += Array(#"{"userId":"14","name":""#.utf8) + [0xFF] + Array(#"","portraitUri":"u"}"#.utf8) + [0x0A]
        let rows = try parseEverywhere(bytes, .jsonl)
        #expect(rows == [
            .bad(1, "no portraitUri field"),
            .bad(2, "name appears twice"),
            .bad(3, "userId is not a string"),
            .bad(4, "bad JSON: expected ',' or '}' at column 43"),
            .bad(5, "bad JSON: expected an object at column 1"),
            .bad(6, "bad JSON: bad escape at column 24"),
            .bad(7, "bad JSON: a lone surrogate at column 29"),
            .bad(8, "bad JSON: text after the object at column 45"),
            .bad(9, "name holds a NUL byte"),
            .bad(10, "userId is empty"),
            .bad(11, "bad JSON: expected ',' or '}' at column 50"),
            .row(12, "12", "a", "u"),
            .bad(13, "bad JSON: control character in a string at column 25"),
            .bad(14, "the line is not valid UTF-8"),
        ])
    }

    @Test func aLineLongerThanTheBufferIsSkipped() throws {
        let long = #"{"userId":"1","name":""# + String(repeating: "x", count: 200) + #"","portraitUri":"u"}"#
        let text = long + "\n" + #"{"userId":"2","name":"b","portraitUri":"u"}"# + "\n"
        let parser = JSONLinesParser(MemoryInput(Array(text.utf8), chunkSize: 7), chunkCapacity: 64)
        #expect(try parser.next() == .bad(line: 1, reason: "the line is over 64 bytes"))
        #expect(try parser.next() == .row(line: 2))
        #expect(Array(parser.values.userId) == Array("2".utf8))
        #expect(try parser.next() == .end)
    }
}
