import ProfilePostgres
import ProfileSystem
import ProfileTestSupport
import Testing

@Suite(.enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct NotificationTests {
    @Test func notificationsArriveInCommitOrderFromEveryConnection() throws {
        let channel = uniqueName("profiled_test_channel")
        let listener = try connect(applicationName: "profiled listen")
        let sender = try connect()
        try listener.execute("LISTEN \(channel)", deadline: deadline(5000))
        func notify(_ connection: PostgresConnection, _ payload: String) throws {
            _ = try connection.query("SELECT pg_notify($1, $2)", [bytes(channel), bytes(payload)], deadline: deadline(5000))
        }
        // The listener's own notification arrives while its query runs; libpq keeps it.
        try notify(listener, "own")
        try notify(sender, "first")
        try sender.execute("BEGIN", deadline: deadline(5000))
        try notify(sender, "never")
        try sender.execute("ROLLBACK", deadline: deadline(5000))
        let other = try connect()
        try other.execute("BEGIN", deadline: deadline(5000))
        try notify(other, "committed last")
        try sender.execute("BEGIN", deadline: deadline(5000))
        try notify(sender, "second")
        try notify(sender, "third é")
        try sender.execute("COMMIT", deadline: deadline(5000))
        try other.execute("COMMIT", deadline: deadline(5000))

        var received: [PostgresNotification] = []
        let giveUp = deadline(3000)
        while received.count < 5 && monotonicNanos() < giveUp {
            received += try listener.notifications(until: giveUp)
        }
        #expect(received.map { String(decoding: $0.payload, as: UTF8.self) }
                == ["own", "first", "second", "third é", "committed last"])
        #expect(received.map(\.senderPID)
                == [listener.backendPID, sender.backendPID, sender.backendPID, sender.backendPID, other.backendPID])
        #expect(received.allSatisfy { $0.channel == channel })

        // Nothing more: the wait ends at the deadline, empty.
        let start = monotonicNanos()
        #expect(try listener.notifications(until: deadline(100)).isEmpty)
        let elapsed = millisecondsSince(start)
        #expect(elapsed >= 95 && elapsed < 1000, "took \(elapsed) ms")
    }

    @Test func aTerminatedListenerLosesItsConnection() throws {
        let listener = try connect(applicationName: "profiled listen")
        try listener.execute("LISTEN \(uniqueName("profiled_test_channel"))", deadline: deadline(5000))
        let admin = try connect()
        #expect(try admin.text("SELECT pg_terminate_backend($1)", [bytes(String(listener.backendPID))]) == "t")
        let start = monotonicNanos()
        let error = try #require(failure { try listener.notifications(until: deadline(3000)) })
        #expect(millisecondsSince(start) < 2000)
        #expect(error.kind == .connectionLost)
        #expect(error.message == "terminating connection due to administrator command")
        #expect(listener.isBroken)
    }
}
