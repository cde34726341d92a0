import RESPProtocol
import Testing

private func unknownCommand(_ arguments: [[UInt8]], sourceLocation: SourceLocation = #_sourceLocation) -> String {
    withArguments(arguments) { views in
        let result = written(count: RESPEncoder.unknownCommandCount(views)) { RESPEncoder.writeUnknownCommand(views, to: $0) }
        #expect(result.exact, sourceLocation: sourceLocation)
        return String(decoding: result.bytes, as: UTF8.self)
    }
}

private func unknownSubcommand(_ arguments: [[UInt8]], sourceLocation: SourceLocation = #_sourceLocation) -> String {
    withArguments(arguments) { views in
        let result = written(count: RESPEncoder.unknownSubcommandCount(views)) { RESPEncoder.writeUnknownSubcommand(views, to: $0) }
        #expect(result.exact, sourceLocation: sourceLocation)
        return String(decoding: result.bytes, as: UTF8.self)
    }
}

private func wrongArity(_ command: RESPCommandName, _ subcommand: StaticString? = nil) -> String {
    let result = written(count: RESPEncoder.wrongNumberOfArgumentsCount(command, subcommand: subcommand)) {
        RESPEncoder.writeWrongNumberOfArguments(command, subcommand: subcommand, to: $0)
    }
    #expect(result.exact)
    return String(decoding: result.bytes, as: UTF8.self)
}

@Test func anUnknownCommandIsNamedAsSentWithItsFirstArguments() {
    #expect(unknownCommand([bytes("GET")]) == "-ERR unknown command 'GET', with args beginning with: \r\n")
    #expect(unknownCommand([bytes("set"), bytes("k"), bytes("v v")])
        == "-ERR unknown command 'set', with args beginning with: 'k' 'v v' \r\n")
    #expect(unknownCommand([bytes("Foo"), []]) == "-ERR unknown command 'Foo', with args beginning with: '' \r\n")
}

/// Redis prints the name with `%.128s`, and the arguments while fewer than 128 bytes of
/// them (quotes and spaces counted) are printed, each cut to what is left of the 128.
@Test func anUnknownCommandsTextIsCutWhereRedisCutsIt() {
    let name = String(repeating: "N", count: 200)
    #expect(unknownCommand([bytes(name)]) == "-ERR unknown command '\(name.prefix(128))', with args beginning with: \r\n")
    // One long argument: cut at 128 bytes, and no other follows.
    let long = String(repeating: "a", count: 200)
    #expect(unknownCommand([bytes("X"), bytes(long), bytes("b")])
        == "-ERR unknown command 'X', with args beginning with: '\(long.prefix(128))' \r\n")
    // 'aaaa' takes 7 bytes; after 18 of them 126 are printed, so the 19th gets 2 bytes.
    let many = Array(repeating: bytes("aaaa"), count: 20)
    #expect(unknownCommand([bytes("X")] + many)
        == "-ERR unknown command 'X', with args beginning with: " + String(repeating: "'aaaa' ", count: 18) + "'aa' \r\n")
    // After exactly 128 bytes, nothing more.
    let exact = [bytes(String(repeating: "b", count: 125)), bytes("c")]
    #expect(unknownCommand([bytes("X")] + exact)
        == "-ERR unknown command 'X', with args beginning with: '\(String(repeating: "b", count: 125))' \r\n")
}

/// Redis prints with C's `%s`, which stops at a NUL, and then turns CR and LF into spaces.
@Test func anUnknownCommandsTextStopsAtNULAndStaysOneLine() {
    #expect(unknownCommand([bytes("a\0b"), bytes("c\0d"), bytes("e\r\nf")])
        == "-ERR unknown command 'a', with args beginning with: 'c' 'e  f' \r\n")
    #expect(unknownCommand([bytes("a\nb")]) == "-ERR unknown command 'a b', with args beginning with: \r\n")
}

@Test func anUnknownSubcommandNamesTheCommandInUpperCase() {
    #expect(unknownSubcommand([bytes("client"), bytes("frob"), bytes("x")]) == "-ERR unknown subcommand 'frob'. Try CLIENT HELP.\r\n")
    #expect(unknownSubcommand([bytes("CoNfIg"), bytes("SET")]) == "-ERR unknown subcommand 'SET'. Try CONFIG HELP.\r\n")
    let long = String(repeating: "s", count: 300)
    #expect(unknownSubcommand([bytes("command"), bytes(long)]) == "-ERR unknown subcommand '\(long.prefix(128))'. Try COMMAND HELP.\r\n")
    #expect(unknownSubcommand([bytes("cl\0x"), bytes("a\rb\0c")]) == "-ERR unknown subcommand 'a b'. Try CL HELP.\r\n")
    #expect(unknownSubcommand([bytes("client\nü"), bytes("x")]) == "-ERR unknown subcommand 'x'. Try CLIENT ü HELP.\r\n")
}

@Test func aWrongArgumentCountNamesTheCommandInLowerCase() {
    #expect(wrongArity(.hget) == "-ERR wrong number of arguments for 'hget' command\r\n")
    #expect(wrongArity(.flushall) == "-ERR wrong number of arguments for 'flushall' command\r\n")
    #expect(wrongArity(.client, "setname") == "-ERR wrong number of arguments for 'client|setname' command\r\n")
}
