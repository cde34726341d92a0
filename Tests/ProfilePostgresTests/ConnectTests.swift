import Glibc
import ProfilePostgres
import ProfileSystem
import ProfileTestSupport
import Testing

/// A TCP socket bound to a free loopback port; with `listen`, the kernel completes handshakes
/// that nobody ever answers, else it refuses every connection.
final class LoopbackSocket {
    let descriptor: Int32
    let port: UInt16

    init(listen shouldListen: Bool) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound, !shouldListen || listen(descriptor, 16) == 0 else {
            close(descriptor)
            throw TestFailure("cannot bind or listen on 127.0.0.1")
        }
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(descriptor) }
}

@Suite(.enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct ConnectTests {
    @Test func connectionsCarryTheirApplicationNameAndSpeakUTF8() throws {
        // A name in the string is overridden by the one the caller gives.
        let connection = try connect(testPostgresConninfo() + " application_name=other client_encoding=LATIN1",
                                     applicationName: "profiled listen")
        let pid = [UInt8](String(connection.backendPID).utf8)
        #expect(try connection.text("SELECT application_name FROM pg_stat_activity WHERE pid = $1", [pid]) == "profiled listen")
        #expect(try connection.text("SELECT pg_backend_pid()") == String(connection.backendPID))
        #expect(try connection.text("SHOW client_encoding") == "UTF8")
    }

    @Test func aWrongPasswordNamesTheServerButNotThePassword() throws {
        let admin = try connect()
        let port = try #require(try admin.text("SHOW port"))
        let role = uniqueName("profiled_test_role")
        try admin.execute("CREATE ROLE \(role) LOGIN PASSWORD 'right-Password-1'", deadline: deadline(5000))
        defer { _ = try? admin.execute("DROP ROLE \(role)", deadline: deadline(5000)) }
        let server = "host=127.0.0.1 port=\(port) dbname=postgres user=\(role)"

        let error = try #require(failure {
            try PostgresConnection(conninfo: server + " password=wrong-Secret-7", applicationName: "profiled test",
                                   deadline: deadline(5000))
        })
        #expect(error.kind == .connect)
        #expect(error.description == "cannot connect to PostgreSQL at 127.0.0.1:\(port) (database postgres, user \(role)): "
                + "password authentication failed for user \"\(role)\"")
        #expect(!error.description.contains("wrong-Secret-7"))
        // The same role with its password gets in: it was the password that failed.
        let connection = try connect(server + " password=right-Password-1")
        #expect(try connection.text("SELECT current_user") == role)
    }

    @Test func aRefusedPortNamesTheServerButNotThePassword() throws {
        let closed = try LoopbackSocket(listen: false)
        for conninfo in ["host=127.0.0.1 port=\(closed.port) dbname=profiles user=profiled password=Secret-7",
                         "postgresql://profiled:Secret-7@127.0.0.1:\(closed.port)/profiles"] {
            let start = monotonicNanos()
            let error = try #require(failure {
                try PostgresConnection(conninfo: conninfo, applicationName: "profiled test", deadline: deadline(5000))
            })
            #expect(millisecondsSince(start) < 2000)
            #expect(error.kind == .connect)
            #expect(error.description.hasPrefix("cannot connect to PostgreSQL at 127.0.0.1:\(closed.port) "
                                                + "(database profiles, user profiled): Connection refused"))
            #expect(!error.description.contains("Secret-7"))
        }
    }

    @Test func aServerThatNeverAnswersFailsByTheDeadline() throws {
        let silent = try LoopbackSocket(listen: true)
        let start = monotonicNanos()
        let error = try #require(failure {
            try PostgresConnection(conninfo: "host=127.0.0.1 port=\(silent.port) user=profiled password=Secret-7",
                                   applicationName: "profiled test", deadline: deadline(200))
        })
        let elapsed = millisecondsSince(start)
        #expect(elapsed >= 190 && elapsed < 1500, "took \(elapsed) ms")
        #expect(error.kind == .connect)
        #expect(error.description.hasPrefix("cannot connect to PostgreSQL at 127.0.0.1:\(silent.port) (database profiled, "))
        #expect(error.description.hasSuffix("no answer before the deadline"))
        #expect(!error.description.contains("Secret-7"))
    }

    @Test(arguments: [
        "host=localhost password=Secret-7 port",
        "host=localhost password=Secret-7 Secret-7",
        "host=localhost password='Secret-7",
        "host=localhost Secret-7=1",
        "postgresql://profiled:Secret-7@[::1",
        "postgresql://profiled:Secret-7@localhost/profiles?Secret-7=1",
        "postgresql://profiled:Secret-7@localhost/profiles?sslmode",
    ])
    func anUnparsableStringIsNamedButNotEchoed(conninfo: String) throws {
        let error = try #require(failure {
            try PostgresConnection(conninfo: conninfo, applicationName: "profiled test", deadline: deadline(5000))
        })
        #expect(error.kind == .connect)
        #expect(error.server == "")
        #expect(error.description.hasPrefix("the PostgreSQL connection string is not valid: "))
        #expect(!error.description.contains("Secret-7"))
    }

    @Test func aMissingDatabaseIsTheServersReason() throws {
        let error = try #require(failure {
            try PostgresConnection(conninfo: testPostgresConninfo() + " dbname=no_such_database",
                                   applicationName: "profiled test", deadline: deadline(5000))
        })
        #expect(error.kind == .connect)
        #expect(error.description.hasSuffix("(database no_such_database, user \(try connect().text("SELECT current_user")!)): "
                                            + "database \"no_such_database\" does not exist"))
        #expect(error.description.contains("socket /"))
    }
}
