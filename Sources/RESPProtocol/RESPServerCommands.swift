import WireBytes

// The commands about the server and the connection whose replies are made of facts the server
// gathers: how HELLO's options read, and how INFO lays its facts out. The server decides what
// they mean (authentication, the connection's name); the codec owns the wire's words.

/// The Redis version profiled's RESP front answers as (HELLO's `version`, INFO's `redis_version`):
/// the one whose commands and replies it implements.
public let respCompatibleRedisVersion: StaticString = "7.4.0"

/// `HELLO [protover [AUTH user token] [SETNAME name]]`, read in Redis's order of checks.
///
/// Views into the request's arguments; the thread that decoded them uses it.
public struct RESPHello {
    /// The protocol asked for; nil when the request names none (the connection's stays).
    public var version: RESPVersion?
    public var token: UnsafeRawBufferPointer?
    public var name: UnsafeRawBufferPointer?

    public static func parse(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Result<RESPHello, RESPProblem> {
        var hello = RESPHello()
        if arguments.count >= 2 {
            guard let asked = RESPArgument.integer(arguments[1]) else { return .failure(.fixed(RESPText.protocolVersion)) }
            guard asked == 2 || asked == 3 else { return .failure(.fixed(RESPText.noProto)) }
            hello.version = asked == 3 ? .resp3 : .resp2
        }
        var index = 2
        while index < arguments.count {
            let option = arguments[index]
            let more = arguments.count - index - 1
            if RESPKeyword.matches(option, "AUTH") && more >= 2 {
                hello.token = arguments[index + 2]
                index += 3
            } else if RESPKeyword.matches(option, "SETNAME") && more >= 1 {
                hello.name = arguments[index + 1]
                index += 2
            } else {
                return .failure(.text([textBytes("ERR Syntax error in HELLO option '"), option, textBytes("'")]))
            }
        }
        return .success(hello)
    }
}

/// What INFO reports, as the server counts it.
///
/// A plain value; any thread may use it.
public struct RESPServerFacts {
    public var profiledVersion: String
    public var port: Int
    public var uptimeSeconds: Int
    public var connectedClients: Int
    /// The cache and the write buffer.
    public var usedMemory: Int
    /// The cache's limit.
    public var maxMemory: Int
    public var commandsProcessed: Int
    public var keyspaceHits: Int
    public var keyspaceMisses: Int
    public var evictedKeys: Int
    public var keys: Int

    public init(profiledVersion: String, port: Int, uptimeSeconds: Int, connectedClients: Int, usedMemory: Int,
                maxMemory: Int, commandsProcessed: Int, keyspaceHits: Int, keyspaceMisses: Int, evictedKeys: Int, keys: Int) {
        self.profiledVersion = profiledVersion
        self.port = port
        self.uptimeSeconds = uptimeSeconds
        self.connectedClients = connectedClients
        self.usedMemory = usedMemory
        self.maxMemory = maxMemory
        self.commandsProcessed = commandsProcessed
        self.keyspaceHits = keyspaceHits
        self.keyspaceMisses = keyspaceMisses
        self.evictedKeys = evictedKeys
        self.keys = keys
    }

    /// INFO's text in Redis's layout: the sections `arguments` (the request's) name, all of
    /// them for none or for ALL, EVERYTHING or DEFAULT.
    public func infoText(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> [UInt8] {
        let sections: [(name: StaticString, lines: [String])] = [
            ("Server", ["redis_version:\(respCompatibleRedisVersion)", "profiled_version:\(profiledVersion)",
                        "redis_mode:standalone", "tcp_port:\(port)", "uptime_in_seconds:\(uptimeSeconds)"]),
            ("Clients", ["connected_clients:\(connectedClients)"]),
            ("Memory", ["used_memory:\(usedMemory)", "maxmemory:\(maxMemory)"]),
            ("Persistence", ["loading:0"]),
            ("Stats", ["total_commands_processed:\(commandsProcessed)", "keyspace_hits:\(keyspaceHits)",
                       "keyspace_misses:\(keyspaceMisses)", "evicted_keys:\(evictedKeys)"]),
            ("Keyspace", ["db0:keys=\(keys),expires=0,avg_ttl=0"]),
        ]
        let everything = arguments.count == 1 || arguments.dropFirst().contains {
            RESPKeyword.matches($0, "ALL") || RESPKeyword.matches($0, "EVERYTHING") || RESPKeyword.matches($0, "DEFAULT")
        }
        var text = ""
        for section in sections {
            let name = textBytes(section.name)
            guard everything || arguments.dropFirst().contains(where: { globMatches($0, name, ignoringCase: true) && $0.count == name.count }) else {
                continue
            }
            if !text.isEmpty { text += "\r\n" }
            text += "# \(section.name)\r\n"
            for line in section.lines { text += line + "\r\n" }
        }
        return Array(text.utf8)
    }
}
