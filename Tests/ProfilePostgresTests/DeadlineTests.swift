import Glibc
import ProfilePostgres
import ProfileSystem
import ProfileTestSupport
import Testing

@Suite(.enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct DeadlineTests {
    @Test func aSlowQueryTimesOutByItsDeadlineAndIsCancelled() throws {
        let connection = try connect()
        let start = monotonicNanos()
        let error = try #require(failure { try connection.query("SELECT pg_sleep(5)", deadline: deadline(200)) })
        let elapsed = millisecondsSince(start)
        #expect(elapsed >= 190 && elapsed < 1500, "took \(elapsed) ms")
        #expect(error.kind == .timeout)
        #expect(connection.isBroken)
        #expect(failure { try connection.query("SELECT 1", deadline: deadline(1000)) }?.kind == .connectionLost)
        // Without the cancel the backend would sleep on for 5 s: closing the socket alone does
        // not stop it.
        let observer = try connect()
        let pid = [UInt8](String(connection.backendPID).utf8)
        var sleeping = true
        let giveUp = deadline(2000)
        while sleeping && monotonicNanos() < giveUp {
            sleeping = try observer.text("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", [pid]) == "1"
            if sleeping { usleep(20_000) }
        }
        #expect(!sleeping, "the backend still runs pg_sleep")
    }

    /// With a parameter far larger than the socket's buffer, the deadline passes while the
    /// statement is still being sent.
    @Test(arguments: [0, 8 << 20])
    func aStoppedBackendTimesOutInsteadOfHanging(parameterBytes: Int) throws {
        let connection = try connect()
        let pid = connection.backendPID
        try #require(kill(pid, SIGSTOP) == 0, "cannot stop backend \(pid): run the tests as the server's user or root")
        defer { kill(pid, SIGCONT) }
        let start = monotonicNanos()
        let parameter = [UInt8](repeating: UInt8(ascii: "x"), count: parameterBytes)
        let error = try #require(failure { try connection.query("SELECT length($1)", [parameter], deadline: deadline(300)) })
        let elapsed = millisecondsSince(start)
        #expect(elapsed >= 290 && elapsed < 1500, "took \(elapsed) ms")
        #expect(error.kind == .timeout)
        #expect(error.description.hasSuffix("did not answer before the deadline: the statement was cancelled and the connection closed"))
    }
}
