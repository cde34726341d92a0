import RESPProtocol
import Testing

private func lookup(_ argument: [UInt8]) -> RESPCommandName? {
    argument.withUnsafeBytes { RESPCommandName.lookup($0) }
}

private func name(_ command: RESPCommandName) -> [UInt8] {
    command.name.withUTF8Buffer { Array($0) }
}

private func uppercased(_ bytes: [UInt8]) -> [UInt8] {
    bytes.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }
}

@Test func everyCommandOfTheFrontIsFoundInAnyCase() {
    let table = "PING ECHO HELLO AUTH SELECT QUIT CLIENT INFO DBSIZE COMMAND CONFIG HGET HMGET HGETALL HEXISTS HLEN HSTRLEN "
        + "HKEYS HVALS HSET HMSET HSETNX HDEL DEL UNLINK EXISTS TYPE TTL PTTL SCAN FLUSHALL FLUSHDB MULTI EXEC DISCARD WATCH UNWATCH SUBSCRIBE UNSUBSCRIBE"
    let names = table.split(separator: " ").map { Array($0.utf8) }
    #expect(Set(names.compactMap(lookup)) == Set(RESPCommandName.allCases))
    for command in RESPCommandName.allCases {
        let lower = name(command)
        #expect(lower == lower.map { $0 | 0x20 }, "\(command)'s name is in lower case")
        let mixed = lower.enumerated().map { $0.offset % 2 == 0 ? $0.element - 0x20 : $0.element }
        #expect(lookup(lower) == command)
        #expect(lookup(uppercased(lower)) == command)
        #expect(lookup(mixed) == command)
    }
}

/// Changing any one byte of a name gives the command of that name, if there is one, and
/// nothing else: case folding touches letters only.
@Test func aChangedNameMatchesOnlyByItsLetters() {
    var wrongMatches: [[UInt8]] = []
    for command in RESPCommandName.allCases {
        for position in name(command).indices {
            for byte in UInt8.min...UInt8.max {
                var argument = name(command)
                argument[position] = byte
                let expected = RESPCommandName.allCases.first { uppercased(name($0)) == uppercased(argument) }
                if lookup(argument) != expected {
                    wrongMatches.append(argument)
                }
            }
        }
    }
    #expect(wrongMatches.isEmpty)
}

@Test func otherArgumentsNameNoCommand() {
    for argument in ["", "H", "HG", "GET", "SET", "HGETALLX", "FLUSHALLS", "XHGET", "HGET ", " HGET", "DE", "DELX", "hge\u{0}"] {
        #expect(lookup(bytes(argument)) == nil, "\(argument)")
    }
    // Every command name with one more byte, and with its last byte dropped.
    for command in RESPCommandName.allCases {
        #expect(lookup(name(command) + [0x73]) == RESPCommandName.allCases.first { name($0) == name(command) + [0x73] })
        #expect(lookup(name(command).dropLast()) == RESPCommandName.allCases.first { name($0) == name(command).dropLast() })
    }
}

@Test func keywordsMatchInAnyCase() {
    func matches(_ argument: String, _ keyword: StaticString) -> Bool {
        bytes(argument).withUnsafeBytes { RESPKeyword.matches($0, keyword) }
    }
    #expect(matches("SETNAME", "SETNAME") && matches("setname", "SETNAME") && matches("SetName", "setname"))
    #expect(matches("lib-name", "LIB-NAME") && matches("MATCH", "match") && matches("", ""))
    #expect(!matches("SETNAM", "SETNAME") && !matches("SETNAMES", "SETNAME") && !matches("MATCI", "MATCH"))
    // Only letters fold: `-` is not `\r` (0x2D | 0x20), `@` is not `` ` ``, `[` is not `{`.
    #expect(!matches("LIB\rNAME", "LIB-NAME") && !matches("`", "@") && !matches("{", "[") && !matches("@", "`"))
}
