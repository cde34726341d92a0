import RESPProtocol
import Testing

/// HELLO's options and INFO's layout, as the codec reads and writes them.
@Suite struct ServerCommandTests {
    private func withArguments<R>(_ words: [String], _ body: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> R) -> R {
        let storage = words.map { Array($0.utf8) }
        let pointers = storage.map { bytes -> UnsafeRawBufferPointer in
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
            copy.copyBytes(from: bytes)
            return UnsafeRawBufferPointer(rebasing: copy[..<bytes.count])
        }
        defer { for pointer in pointers { UnsafeMutableRawPointer(mutating: pointer.baseAddress!).deallocate() } }
        return pointers.withUnsafeBufferPointer { body($0) }
    }

    private func problemText(_ problem: RESPProblem) -> String {
        switch problem {
        case .fixed(let text): "\(text)"
        case .made(let bytes): String(decoding: bytes, as: UTF8.self)
        }
    }

    @Test func helloReadsItsOptionsInRedisOrder() {
        withArguments(["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "chat"]) { arguments in
            guard case .success(let hello) = RESPHello.parse(arguments) else { Issue.record("refused"); return }
            #expect(hello.version == .resp3)
            #expect(hello.token.map { String(decoding: $0, as: UTF8.self) } == "secret")
            #expect(hello.name.map { String(decoding: $0, as: UTF8.self) } == "chat")
        }
        withArguments(["HELLO"]) { arguments in
            guard case .success(let hello) = RESPHello.parse(arguments) else { Issue.record("refused"); return }
            #expect(hello.version == nil && hello.token == nil && hello.name == nil)
        }
    }

    @Test(arguments: [
        (["HELLO", "4"], "NOPROTO unsupported protocol version"),
        (["HELLO", "x"], "ERR Protocol version is not an integer or out of range"),
        (["HELLO", "2", "AUTH", "default"], "ERR Syntax error in HELLO option 'AUTH'"),
        (["HELLO", "2", "SETNAME"], "ERR Syntax error in HELLO option 'SETNAME'"),
        (["HELLO", "3", "FOO", "bar"], "ERR Syntax error in HELLO option 'FOO'"),
    ])
    func badHellosAreRefused(words: [String], error: String) {
        withArguments(words) { arguments in
            guard case .failure(let problem) = RESPHello.parse(arguments) else { Issue.record("accepted \(words)"); return }
            #expect(problemText(problem) == error)
        }
    }

    @Test func infoLaysOutTheSectionsAsked() {
        let facts = RESPServerFacts(profiledVersion: "9.9", port: 6400, uptimeSeconds: 5, connectedClients: 2, usedMemory: 100,
                                    maxMemory: 200, commandsProcessed: 7, keyspaceHits: 3, keyspaceMisses: 4, evictedKeys: 0, keys: 1)
        let all = withArguments(["INFO"]) { String(decoding: facts.infoText($0), as: UTF8.self) }
        #expect(all.hasPrefix("# Server\r\nredis_version:7.4.0\r\nprofiled_version:9.9\r\n"))
        #expect(all.contains("\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"))
        #expect(withArguments(["INFO", "everything"]) { String(decoding: facts.infoText($0), as: UTF8.self) } == all)
        let two = withArguments(["INFO", "stats", "CLIENTS"]) { String(decoding: facts.infoText($0), as: UTF8.self) }
        #expect(two == "# Clients\r\nconnected_clients:2\r\n\r\n# Stats\r\ntotal_commands_processed:7\r\nkeyspace_hits:3\r\nkeyspace_misses:4\r\nevicted_keys:0\r\n")
        #expect(withArguments(["INFO", "nothing"]) { facts.infoText($0) }.isEmpty)
    }
}
