/// The errors Redis gives a request whose command it cannot run, in Redis 7.2's exact words:
/// clients and their tests match on them. Each comes as an exact count and a writer.
extension RESPEncoder {
    /// Bytes in `unknownCommand`'s reply for `arguments`.
    public static func unknownCommandCount(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Int {
        var reply = ReplyBuilder(nil)
        buildUnknownCommand(arguments, &reply)
        return reply.count
    }

    /// Writes `-ERR unknown command '<name>', with args beginning with: '<a1>' '<a2>' \r\n`
    /// for a request whose first argument names no command.
    ///
    /// As Redis's `commandCheckExistence` prints it: the name as sent, at most 128 bytes;
    /// then the arguments, each in quotes and followed by a space, while fewer than 128
    /// bytes of them are written, each cut so that its bytes and those before reach at most
    /// 128. Redis prints them with C's `%s`, so each stops at its first NUL; CR and LF are
    /// written as spaces. With no arguments the text ends in `with: ` and CR LF.
    ///
    /// - Parameters:
    ///   - arguments: The request's arguments, the command name first; at least one.
    ///   - out: Room for `unknownCommandCount(arguments)` bytes.
    /// - Returns: The bytes written.
    public static func writeUnknownCommand(
        _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, to out: UnsafeMutableRawPointer
    ) -> Int {
        var reply = ReplyBuilder(out)
        buildUnknownCommand(arguments, &reply)
        return reply.count
    }

    /// Bytes in `unknownSubcommand`'s reply for `arguments`.
    public static func unknownSubcommandCount(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Int {
        var reply = ReplyBuilder(nil)
        buildUnknownSubcommand(arguments, &reply)
        return reply.count
    }

    /// Writes `-ERR unknown subcommand '<sub>'. Try <NAME> HELP.\r\n` for a command with
    /// subcommands (CLIENT, COMMAND, CONFIG) whose second argument names none of them.
    ///
    /// As Redis prints it: the subcommand as sent, at most 128 bytes; the command as sent,
    /// in upper case (ASCII letters only). Each stops at its first NUL; CR and LF are
    /// written as spaces.
    ///
    /// - Parameters:
    ///   - arguments: The request's arguments; at least two.
    ///   - out: Room for `unknownSubcommandCount(arguments)` bytes.
    /// - Returns: The bytes written.
    public static func writeUnknownSubcommand(
        _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, to out: UnsafeMutableRawPointer
    ) -> Int {
        var reply = ReplyBuilder(out)
        buildUnknownSubcommand(arguments, &reply)
        return reply.count
    }

    /// Bytes in `wrongNumberOfArguments`'s reply.
    public static func wrongNumberOfArgumentsCount(_ command: RESPCommandName, subcommand: StaticString? = nil) -> Int {
        var reply = ReplyBuilder(nil)
        buildWrongNumberOfArguments(command, subcommand, &reply)
        return reply.count
    }

    /// Writes `-ERR wrong number of arguments for '<name>' command\r\n`.
    ///
    /// Redis names the command by its full name in lower case, whatever case it was sent
    /// in: `hget`, and for a subcommand the command, `|` and the subcommand,
    /// `client|setname`.
    ///
    /// - Parameters:
    ///   - command: The command.
    ///   - subcommand: The subcommand in lower case, for a command with subcommands.
    ///   - out: Room for `wrongNumberOfArgumentsCount` bytes.
    /// - Returns: The bytes written.
    public static func writeWrongNumberOfArguments(
        _ command: RESPCommandName, subcommand: StaticString? = nil, to out: UnsafeMutableRawPointer
    ) -> Int {
        var reply = ReplyBuilder(out)
        buildWrongNumberOfArguments(command, subcommand, &reply)
        return reply.count
    }

    /// Redis's `%.128s`: what it prints of a client's argument.
    private static let printedArgumentLimit = 128

    private static func buildUnknownCommand(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ reply: inout ReplyBuilder) {
        precondition(!arguments.isEmpty, "an unknown command needs its name")
        reply.put("-ERR unknown command '")
        reply.putOneLine(arguments[0].cString(atMost: printedArgumentLimit))
        reply.put("', with args beginning with: ")
        var printed = 0
        var index = 1
        while index < arguments.count && printed < printedArgumentLimit {
            let argument = arguments[index].cString(atMost: printedArgumentLimit - printed)
            reply.put(UInt8(ascii: "'"))
            reply.putOneLine(argument)
            reply.put("' ")
            printed += argument.count + 3
            index += 1
        }
        reply.put("\r\n")
    }

    private static func buildUnknownSubcommand(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ reply: inout ReplyBuilder) {
        precondition(arguments.count >= 2, "an unknown subcommand needs its command and itself")
        reply.put("-ERR unknown subcommand '")
        reply.putOneLine(arguments[1].cString(atMost: printedArgumentLimit))
        reply.put("'. Try ")
        for b in arguments[0].cString(atMost: arguments[0].count) {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): reply.put(b - 0x20)
            case ASCII.cr, ASCII.lf: reply.put(ASCII.space)
            default: reply.put(b)
            }
        }
        reply.put(" HELP.\r\n")
    }

    private static func buildWrongNumberOfArguments(
        _ command: RESPCommandName, _ subcommand: StaticString?, _ reply: inout ReplyBuilder
    ) {
        reply.put("-ERR wrong number of arguments for '")
        reply.put(command.name)
        if let subcommand {
            reply.put(UInt8(ascii: "|"))
            reply.put(subcommand)
        }
        reply.put("' command\r\n")
    }
}
