import RESPProtocol
import Testing

/// How the codec reads single arguments: globs and integers, as Redis does.
@Suite struct ArgumentTests {
    @Test(arguments: [
        ("*", "anything", true), ("user:*", "user:42", true), ("user:*", "use:42", false), ("id?", "id7", true),
        ("id?", "id", false), ("id[0-3]", "id2", true), ("id[0-3]", "id4", false), ("id[^0-3]", "id4", true),
        ("a\\*b", "a*b", true), ("a\\*b", "axb", false), ("*x*y", "axbxcy", true), ("[abc]", "b", true),
    ])
    func globsMatchAsRedisDoes(pattern: String, text: String, matches: Bool) {
        let result = Array(pattern.utf8).withUnsafeBytes { p in
            Array(text.utf8).withUnsafeBytes { t in globMatches(p, t, ignoringCase: false) }
        }
        #expect(result == matches, "\(pattern) vs \(text)")
    }

    @Test(arguments: [("0", 0), ("42", 42), ("-7", -7), ("9223372036854775807", Int.max)])
    func integersAreReadAsRedisReadsThem(text: String, value: Int) {
        #expect(Array(text.utf8).withUnsafeBytes { RESPArgument.integer($0) } == value)
    }

    @Test(arguments: ["", "01", "-0", "+1", " 1", "1x", "9223372036854775808", "-"])
    func notIntegers(text: String) {
        #expect(Array(text.utf8).withUnsafeBytes { RESPArgument.integer($0) } == nil)
    }
}
