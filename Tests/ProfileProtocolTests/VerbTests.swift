import ProfileModel
@testable import ProfileProtocol
import Testing

private func lookup(_ token: [UInt8]) -> Verb? {
    token.withUnsafeBytes { Verb.lookup($0) }
}

private func name(_ verb: Verb) -> [UInt8] {
    verb.name.withUTF8Buffer { Array($0) }
}

@Test func everyVerbIsFoundInAnyASCIICase() {
    for verb in Verb.allCases {
        let upper = name(verb)
        let lower = upper.map { $0 | 0x20 }
        let mixed = upper.enumerated().map { $0.offset % 2 == 0 ? $0.element : $0.element | 0x20 }
        #expect(lookup(upper) == verb)
        #expect(lookup(lower) == verb)
        #expect(lookup(mixed) == verb)
        #expect(decode(lower + bytes(#" "" "" "" """#)).code == .args, "\(verb) is known to the decoder")
    }
}

/// Changing any one byte of a verb gives the command with that name in upper
/// case, if there is one, and nothing else: case folding touches letters only.
@Test func aChangedVerbMatchesOnlyByItsLetters() {
    func asciiUppercased(_ token: [UInt8]) -> [UInt8] {
        token.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }
    }
    var wrongMatches: [[UInt8]] = []
    for verb in Verb.allCases {
        for position in name(verb).indices {
            for byte in UInt8.min...UInt8.max {
                var token = name(verb)
                token[position] = byte
                let expected = Verb.allCases.first { name($0) == asciiUppercased(token) }
                if lookup(token) != expected {
                    wrongMatches.append(token)
                }
            }
        }
    }
    #expect(wrongMatches.isEmpty)
}

@Test func prefixesAndExtensionsOfVerbsAreUnknown() {
    for verb in Verb.allCases {
        let upper = name(verb)
        #expect(lookup(Array(upper.dropLast())) == nil)
        #expect(lookup(upper + [0x53]) == nil)
        #expect(lookup(upper + [0x20]) == nil)
    }
    #expect(lookup([]) == nil)
    #expect(lookup(bytes("FLUSHALLS")) == nil)
}

@Test func aQuotedVerbIsMatchedAfterUnescaping() {
    #expect(decode(#""get" 42"#) == .get(bytes("42")))
    #expect(decode(#""\x47ET" 42"#) == .get(bytes("42")))
}

@Test func anUnknownVerbIsNamedInTheMessage() {
    #expect(decode("FROB").reply == "ERROR UNKNOWN unknown command 'FROB'")
    #expect(decode("frob 1 2 3").reply == "ERROR UNKNOWN unknown command 'frob'")
    #expect(decode("GÉT 1").reply == "ERROR UNKNOWN unknown command 'GÉT'")
    #expect(decode(#""a b" 1"#).reply == #"ERROR UNKNOWN unknown command '"a b"'"#)
    #expect(decode(#""" 1"#).reply == #"ERROR UNKNOWN unknown command '""'"#)
    #expect(decode(#""x\ny""#).reply == #"ERROR UNKNOWN unknown command '"x\ny"'"#)
}

@Test func aLongUnknownVerbIsCutAtACharacterBoundary() {
    let long = String(repeating: "X", count: 40)
    #expect(decode(long).reply == "ERROR UNKNOWN unknown command '\(String(repeating: "X", count: 32))...'")
    // 31 ASCII bytes then a 3-byte character: it would straddle byte 32, so it is left out.
    let straddling = String(repeating: "Y", count: 31) + "明明"
    #expect(decode(straddling).reply == "ERROR UNKNOWN unknown command '\(String(repeating: "Y", count: 31))...'")
    let exact = String(repeating: "Z", count: 32)
    #expect(decode(exact).reply == "ERROR UNKNOWN unknown command '\(exact)'")
}

@Test func requiredRoles() {
    let expected: [Verb: Role] = [
        .ping: .none, .auth: .none, .quit: .none,
        .get: .read, .mget: .read, .exists: .read, .count: .read, .recent: .read, .scan: .read, .stats: .read,
        .set: .write, .mset: .write, .update: .write, .del: .write,
        .flushall: .admin,
    ]
    for verb in Verb.allCases {
        #expect(verb.requiredRole == expected[verb], "\(verb)")
    }
}

@Test func writesAreTheCommandsThatChangeData() {
    #expect(Set(Verb.allCases.filter(\.isWrite)) == [.set, .mset, .update, .del, .flushall])
}

@Test func rolesNest() {
    #expect(Role.none < .read && Role.read < .write && Role.write < .admin)
    #expect(Role.allCases.sorted() == [.none, .read, .write, .admin])
}

@Test func roleNamesFromTheTokensFile() {
    #expect(Role(name: bytes("read")) == .read)
    #expect(Role(name: bytes("write")) == .write)
    #expect(Role(name: bytes("admin")) == .admin)
    for unknown in ["none", "READ", "Admin", "", "reader", "rea"] {
        #expect(Role(name: bytes(unknown)) == nil, "\(unknown)")
    }
    for role in Role.allCases where role != .none {
        #expect(Role(name: role.name.withUTF8Buffer { Array($0) }) == role)
    }
}
