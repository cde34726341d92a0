import ProfileTestSupport
import Glibc
import ProfileClient
import Testing

/// Every command that changes data, under every role, on both fronts; and every RESP command's
/// key and field checks. A refused or rejected command answers its error and changes nothing.
@Suite struct CommandCheckTests {
    enum Role: Int, CaseIterable, CustomStringConvertible {
        case none, read, write, admin
        var token: String? { self == .none ? nil : "\(self)-token" }
        var description: String { ["no role", "read", "write", "admin"][rawValue] }
    }

    static let tokens = "read read-token\nwrite write-token\nadmin admin-token\n"

    /// A server with a token of each role and the RESP front; `k` and `j` hold known profiles
    /// before each command, put there through an admin connection of each front.
    final class Front {
        let server: TestServer
        let admin: ProfileConnection

        init(_ extraArguments: [String] = []) throws {
            // The tokens file is read at start-up only; the server keeps a directory of its own.
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            writeText(directory + "/tokens", CommandCheckTests.tokens)
            server = try TestServer(["--resp-port", "0", "--tokens", directory + "/tokens"] + extraArguments)
            admin = try server.connect()
            #expect(try admin.roundTrip("AUTH admin-token\n") == "OK")
        }

        func reset() throws {
            #expect(try admin.roundTrip("FLUSHALL\n") == "OK")
            #expect(try admin.roundTrip("MSET k Kay https://x/k.png j Jay https://x/j.png\n") == "STORED 2")
        }

        /// What the store holds, read by the admin: the known profiles and the count.
        func state() throws -> [String] {
            [try admin.roundTrip("GET k\n"), try admin.roundTrip("GET j\n"), try admin.roundTrip("COUNT\n")]
        }

        static let untouched = ["VALUE k Kay https://x/k.png", "VALUE j Jay https://x/j.png", "COUNT 2"]

        func line(as role: Role) throws -> ProfileConnection {
            let connection = try server.connect()
            if let token = role.token { #expect(try connection.roundTrip("AUTH \(token)\n") == "OK") }
            return connection
        }

        func resp(as role: Role) throws -> RESPTestClient {
            let connection = try server.connectRESP()
            if let token = role.token { #expect(try connection.call("AUTH", token) == "+OK\r\n") }
            return connection
        }
    }

    /// The line protocol's writes, with the least role each needs and its reply when allowed.
    static let lineWrites: [(request: String, least: Role, reply: String)] = [
        ("SET k New https://x/new.png", .write, "STORED"),
        ("MSET k New https://x/new.png n Nu https://x/n.png", .write, "STORED 2"),
        ("UPDATE k name New", .write, "UPDATED"),
        ("DEL k", .write, "DELETED"),
        ("FLUSHALL", .admin, "OK"),
    ]

    @Test func everyLineWriteUnderEveryRole() throws {
        let front = try Front()
        for (request, least, reply) in Self.lineWrites {
            for role in Role.allCases {
                try front.reset()
                let connection = try front.line(as: role)
                let answer = try connection.roundTrip(request + "\n")
                if role.rawValue >= least.rawValue {
                    #expect(answer == reply, "\(request) as \(role)")
                    #expect(try front.state() != Front.untouched, "\(request) as \(role) changed nothing")
                } else {
                    let refusal = role == .none ? "ERROR NOAUTH" : "ERROR DENIED"
                    #expect(answer.hasPrefix(refusal), "\(request) as \(role): \(answer)")
                    #expect(try front.state() == Front.untouched, "\(request) as \(role) changed data")
                }
            }
        }
    }

    /// RESP's writes, with the least role each needs and its reply when allowed.
    static let respWrites: [(request: [String], least: Role, reply: String)] = [
        (["HSET", "k", "name", "New"], .write, ":0\r\n"),
        (["HMSET", "k", "name", "New", "portraitUri", "https://x/new.png"], .write, "+OK\r\n"),
        (["HSETNX", "n", "name", "Nu"], .write, ":1\r\n"),
        (["HDEL", "k", "portraitUri"], .write, ":1\r\n"),
        (["DEL", "k", "j"], .write, ":2\r\n"),
        (["UNLINK", "k"], .write, ":1\r\n"),
        (["FLUSHALL"], .admin, "+OK\r\n"),
        (["FLUSHDB"], .admin, "+OK\r\n"),
    ]

    @Test func everyRESPWriteUnderEveryRole() throws {
        let front = try Front()
        for (request, least, reply) in Self.respWrites {
            for role in Role.allCases {
                try front.reset()
                let connection = try front.resp(as: role)
                connection.send(RESPTestClient.multibulk(request))
                let answer = try connection.reply()
                let name = request[0]
                if role.rawValue >= least.rawValue {
                    #expect(answer == reply, "\(name) as \(role)")
                    #expect(try front.state() != Front.untouched, "\(name) as \(role) changed nothing")
                } else {
                    let refusal = role == .none
                        ? "-NOAUTH Authentication required.\r\n"
                        : "-NOPERM User default has no permissions to run the '\(name.lowercased())' command\r\n"
                    #expect(answer == refusal, "\(name) as \(role)")
                    #expect(try front.state() == Front.untouched, "\(name) as \(role) changed data")
                }
            }
        }
    }

    /// Every RESP read answers the read role and refuses a connection with none.
    @Test(arguments: [["HGET", "k", "name"], ["HMGET", "k", "name"], ["HGETALL", "k"], ["HEXISTS", "k", "name"],
                      ["HLEN", "k"], ["HSTRLEN", "k", "name"], ["HKEYS", "k"], ["HVALS", "k"], ["EXISTS", "k"],
                      ["TYPE", "k"], ["TTL", "k"], ["PTTL", "k"], ["SCAN", "0"], ["DBSIZE"], ["INFO"]])
    func everyRESPReadNeedsTheReadRole(_ request: [String]) throws {
        let front = try Front()
        try front.reset()
        let none = try front.resp(as: .none)
        none.send(RESPTestClient.multibulk(request))
        #expect(try none.reply() == "-NOAUTH Authentication required.\r\n")
        let reader = try front.resp(as: .read)
        reader.send(RESPTestClient.multibulk(request))
        let answer = try reader.reply()
        #expect(!answer.hasPrefix("-"), "\(answer)")
    }

    // MARK: RESP's key and field checks

    static let unknownField = "-ERR unknown profile field 'Name' (fields are name and portraitUri)\r\n"

    /// Each command that names fields, with an unknown one first and after a good one: an
    /// error, and nothing written.
    @Test(arguments: [
        ["HSET", "k", "Name", "x"], ["HSET", "k", "name", "x", "Name", "y"],
        ["HMSET", "k", "Name", "x"], ["HMSET", "k", "portraitUri", "u", "Name", "y"],
        ["HSETNX", "k", "Name", "x"],
        ["HDEL", "k", "Name"], ["HDEL", "k", "name", "Name"], ["HDEL", "k", "Name", "portraitUri"],
        ["HGET", "k", "Name"], ["HMGET", "k", "Name"], ["HMGET", "k", "name", "Name"],
        ["HEXISTS", "k", "Name"], ["HSTRLEN", "k", "Name"],
    ])
    func anUnknownFieldIsAnErrorAndChangesNothing(_ request: [String]) throws {
        let front = try Front()
        try front.reset()
        let connection = try front.resp(as: .admin)
        connection.send(RESPTestClient.multibulk(request))
        #expect(try connection.reply() == Self.unknownField)
        #expect(try front.state() == Front.untouched)
        // Inside MULTI the same check fails the transaction, and EXEC writes nothing.
        #expect(try connection.call("MULTI") == "+OK\r\n")
        #expect(try connection.call("HSET", "k", "name", "Queued") == "+QUEUED\r\n")
        connection.send(RESPTestClient.multibulk(request))
        #expect(try connection.reply() == Self.unknownField)
        #expect(try connection.call("EXEC") == "-EXECABORT Transaction discarded because of previous errors.\r\n")
        #expect(try front.state() == Front.untouched)
    }

    /// Each write with a key that names no profile (no prefix, the bare prefix, an id over 128
    /// bytes): `-ERR invalid key`, and nothing written, even where the other keys are good.
    @Test(arguments: [
        ["HSET", "@", "name", "x"], ["HMSET", "@", "name", "x"], ["HSETNX", "@", "name", "x"],
        ["HDEL", "@", "name"], ["DEL", "@"], ["DEL", "user:k", "@"], ["UNLINK", "user:j", "@"],
    ], ["k", "user:", "user:" + String(repeating: "i", count: 129)])
    func aKeyThatNamesNoProfileIsAnErrorForWrites(_ request: [String], _ badKey: String) throws {
        let front = try Front(["--resp-key-prefix", "user:"])
        try front.reset()
        let connection = try front.resp(as: .admin)
        let sent = request.map { $0 == "@" ? badKey : $0 }
        connection.send(RESPTestClient.multibulk(sent))
        let answer = try connection.reply()
        #expect(answer.hasPrefix("-ERR invalid key '\(badKey.prefix(64))': a profile's key is the prefix 'user:'"), "\(answer)")
        #expect(try front.state() == Front.untouched)
    }

    /// Reads of a key that names no profile find nothing, as for a missing profile.
    @Test func aKeyThatNamesNoProfileIsFoundEmptyByReads() throws {
        let front = try Front(["--resp-key-prefix", "user:"])
        try front.reset()
        let connection = try front.resp(as: .read)
        #expect(try connection.call("HGETALL", "k") == "*0\r\n")
        #expect(try connection.call("HGET", "k", "name") == "$-1\r\n")
        #expect(try connection.call("HMGET", "k", "name", "portraitUri") == "*2\r\n$-1\r\n$-1\r\n")
        #expect(try connection.call("HEXISTS", "k", "name") == ":0\r\n")
        #expect(try connection.call("HLEN", "k") == ":0\r\n")
        #expect(try connection.call("HSTRLEN", "k", "name") == ":0\r\n")
        #expect(try connection.call("HKEYS", "k") == "*0\r\n")
        #expect(try connection.call("HVALS", "k") == "*0\r\n")
        #expect(try connection.call("EXISTS", "k", "user:", "user:k") == ":1\r\n")
        #expect(try connection.call("TYPE", "k") == "+none\r\n")
        #expect(try connection.call("TTL", "k") == ":-2\r\n")
        #expect(try connection.call("HGET", "user:k", "name") == "$3\r\nKay\r\n")
    }
}
