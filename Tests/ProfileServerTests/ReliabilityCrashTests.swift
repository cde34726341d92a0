import ProfileTestSupport
import Glibc
import ProfileClient
import Synchronization
import Testing

/// Writers on several connections, the server killed under them, restarted on the same store,
/// and the whole history checked: every acknowledged write is there, nothing unacknowledged is
/// half-applied, and RECENT agrees with the order the writes were acknowledged in.
///
/// The check rests on one property of the protocol: a connection's writes commit in the order
/// they were sent, so what survives of one connection's writes is a prefix of them, at least as
/// long as what was acknowledged. Each writer owns its ids, so the store must match "the first
/// k writes of this connection applied" for some k between acknowledged and sent. A partly
/// applied MSET, a lost acknowledged write or a write out of order matches no k.
@Suite(.serialized) struct ReliabilityCrashTests {
    static let writers = 4
    static let idsPerWriter = 40

    @Test func everyAcknowledgedWriteSurvivesSIGKILL() throws {
        let rounds = reliabilityFull ? 50 : 4
        let server = try TestServer()
        let history = History(writers: Self.writers, idsPerWriter: Self.idsPerWriter)
        var random = SeededGenerator(seed: 0x5EED_C2A5)
        for round in 0..<rounds {
            let killAfter = UInt32.random(in: 20_000...300_000, using: &random)
            try history.runRound(server: server, seed: random.next(), stopping: .kill(afterMicroseconds: killAfter))
            try server.start()
            try history.verify(server: server, round: round)
        }
        print("reliability crash: rounds=\(rounds) writes_sent=\(history.sentTotal) acknowledged=\(history.acknowledgedTotal) unacknowledged_committed=\(history.unacknowledgedCommitted) unacknowledged_lost=\(history.unacknowledgedLost) profiles_compared=\(history.profilesCompared)")
        #expect(history.acknowledgedTotal > rounds, "the writers got almost nothing acknowledged")
    }

    @Test func sigtermUnderLoadExitsZeroAndKeepsEveryAcknowledgedWrite() throws {
        let rounds = reliabilityFull ? 10 : 1
        let server = try TestServer()
        let history = History(writers: Self.writers, idsPerWriter: Self.idsPerWriter)
        var random = SeededGenerator(seed: 0x7E57_5160)
        for round in 0..<rounds {
            let stopAfter = UInt32.random(in: 50_000...250_000, using: &random)
            try history.runRound(server: server, seed: random.next(), stopping: .terminate(afterMicroseconds: stopAfter))
            #expect(history.lastStatus.map(exitCode) == 0, "SIGTERM under load: wait status \(String(describing: history.lastStatus))")
            #expect(history.lastStopSeconds < 10, "SIGTERM took \(history.lastStopSeconds) s")
            try server.start()
            try history.verify(server: server, round: round)
        }
        print("reliability sigterm: rounds=\(rounds) acknowledged=\(history.acknowledgedTotal) slowest_stop_ms=\(Int(history.slowestStopSeconds * 1000))")
    }
}

/// A logical clock shared by the writer threads: a tick taken before a request is sent and
/// after its reply arrives orders writes on different connections.
final class LogicalClock: Sendable {
    private let value = Atomic<Int>(0)
    func tick() -> Int { value.add(1, ordering: .sequentiallyConsistent).newValue }
}

struct Triple: Equatable {
    var userId: String
    var name: String
    var portraitUri: String
}

/// One write as a client sent it.
struct SentWrite {
    enum Operation {
        case set(Triple)
        case mset([Triple])
        case update(userId: String, name: String, portraitUri: String?)
        case del(userId: String)
    }
    var operation: Operation
    /// Taken before the request's bytes were sent.
    var sentTick = 0
    /// Taken after its reply arrived; for an unacknowledged write found committed, a tick after
    /// the server died. Nil while unknown.
    var doneTick: Int? = nil
    var acknowledged = false
}

/// What produced a profile's current value: write `index` of a writer, triple `position` in it.
struct Producer: Comparable {
    var writer: Int
    var index: Int
    var position: Int
    static func < (a: Producer, b: Producer) -> Bool { (a.index, a.position) < (b.index, b.position) }
}

struct ModelProfile: Equatable {
    var name: String
    var portraitUri: String
    var producer: Producer
    static func == (a: ModelProfile, b: ModelProfile) -> Bool { a.name == b.name && a.portraitUri == b.portraitUri }
}

/// One writer connection's ids, its log of writes, and the state they lead to.
final class WriterModel: @unchecked Sendable {
    let index: Int
    let ids: [String]
    /// Every write this writer made that is part of history (committed), then this round's.
    var log: [SentWrite] = []
    /// The state after the committed writes.
    var committed: [String: ModelProfile] = [:]
    /// Where this round's writes start in `log`.
    var roundStart = 0
    var failures: [String] = []
    private var serial = 0

    init(index: Int, ids: Int) {
        self.index = index
        self.ids = (0..<ids).map { i in i % 5 == 0 ? "w\(index) u\(i)" : "w\(index)-u\(i)" }
    }

    /// Applies write `i` of the log to `state`; returns the reply it must get.
    func apply(_ i: Int, to state: inout [String: ModelProfile]) -> String {
        let producer = Producer(writer: index, index: i, position: 0)
        switch log[i].operation {
        case .set(let t):
            state[t.userId] = ModelProfile(name: t.name, portraitUri: t.portraitUri, producer: producer)
            return "STORED"
        case .mset(let triples):
            for (position, t) in triples.enumerated() {
                var p = producer
                p.position = position
                state[t.userId] = ModelProfile(name: t.name, portraitUri: t.portraitUri, producer: p)
            }
            return "STORED \(triples.count)"
        case .update(let userId, let name, let portraitUri):
            guard var profile = state[userId] else { return "NOTFOUND \(encoded(userId))" }
            profile.name = name
            if let portraitUri { profile.portraitUri = portraitUri }
            profile.producer = producer
            state[userId] = profile
            return "UPDATED"
        case .del(let userId):
            return state.removeValue(forKey: userId) == nil ? "NOTFOUND \(encoded(userId))" : "DELETED"
        }
    }

    /// A random write over this writer's ids, with values no other write uses.
    func makeWrite(_ random: inout SeededGenerator) -> SentWrite.Operation {
        serial += 1
        let marker = "\(index).\(log.count).\(serial)"
        func triple(_ id: String) -> Triple {
            Triple(userId: id, name: "n \(marker) 名", portraitUri: "https://cdn.example/p/\(id.utf8.count)/\(marker).png")
        }
        switch Int.random(in: 0..<10, using: &random) {
        case 0..<3:
            return .set(triple(ids.randomElement(using: &random)!))
        case 3..<6:
            let picked = ids.shuffled(using: &random).prefix(Int.random(in: 2...6, using: &random))
            return .mset(picked.enumerated().map { i, id in
                var t = triple(id)
                t.name += " #\(i)"
                return t
            })
        case 6..<8:
            let id = ids.randomElement(using: &random)!
            let both = Bool.random(using: &random)
            return .update(userId: id, name: "u \(marker)", portraitUri: both ? "https://cdn.example/u/\(marker)" : nil)
        default:
            return .del(userId: ids.randomElement(using: &random)!)
        }
    }

    /// Writes until the connection fails (the server was stopped) or the bounds run out.
    func write(to endpoint: Endpoint, clock: LogicalClock, seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var tentative = committed
        let deadline = monotonicSeconds() + 10
        guard let connection = try? ProfileConnection(endpoint, timeoutSeconds: 10) else {
            return // killed before this writer got in: a round with no writes from it
        }
        while monotonicSeconds() < deadline && log.count - roundStart < 20_000 {
            var expected: [String] = []
            let window = Int.random(in: 1...8, using: &random)
            let first = log.count
            for _ in 0..<window {
                let operation = makeWrite(&random)
                log.append(SentWrite(operation: operation))
                expected.append(apply(log.count - 1, to: &tentative))
                send(operation, on: connection)
            }
            let tick = clock.tick()
            for i in first..<log.count { log[i].sentTick = tick }
            do {
                try connection.flush()
                for i in first..<log.count {
                    let reply = try connection.line()
                    log[i].doneTick = clock.tick()
                    log[i].acknowledged = true
                    if reply != expected[i - first] {
                        failures.append("writer \(index) write \(i) \(log[i].operation): got \(reply), expected \(expected[i - first])")
                    }
                }
            } catch {
                return
            }
        }
    }

    private func send(_ operation: SentWrite.Operation, on connection: ProfileConnection) {
        switch operation {
        case .set(let t):
            connection.send("SET", [t.userId, t.name, t.portraitUri])
        case .mset(let triples):
            connection.send("MSET", triples.flatMap { [$0.userId, $0.name, $0.portraitUri] })
        case .update(let userId, let name, let portraitUri):
            connection.send("UPDATE", [userId, "name", name] + (portraitUri.map { ["portraitUri", $0] } ?? []))
        case .del(let userId):
            connection.send("DEL", [userId])
        }
    }

    /// Finds the k, from acknowledged to sent, such that the store holds exactly this round's
    /// first k writes; keeps those as history and drops the rest (they never happened).
    func settle(against stored: [String: (name: String, portraitUri: String)], afterStopTick: Int) -> Bool {
        let acknowledged = log[roundStart...].prefix { $0.acknowledged }.count
        var state = committed
        for i in roundStart..<(roundStart + acknowledged) { _ = apply(i, to: &state) }
        var k = roundStart + acknowledged
        while true {
            if matches(state, stored) {
                for i in k..<log.count where log[i].acknowledged {
                    failures.append("writer \(index): acknowledged write \(i) \(log[i].operation) is missing")
                }
                for i in roundStart..<k where !log[i].acknowledged { log[i].doneTick = afterStopTick }
                log.removeSubrange(k...)
                committed = state
                roundStart = log.count
                return true
            }
            guard k < log.count else { return false }
            _ = apply(k, to: &state)
            k += 1
        }
    }

    private func matches(_ state: [String: ModelProfile], _ stored: [String: (name: String, portraitUri: String)]) -> Bool {
        guard state.count == stored.count else { return false }
        for (id, profile) in state {
            guard let found = stored[id], found.name == profile.name, found.portraitUri == profile.portraitUri else { return false }
        }
        return true
    }
}

/// How a round ends.
enum RoundEnd {
    case kill(afterMicroseconds: UInt32)
    case terminate(afterMicroseconds: UInt32)
}

/// The writers, the rounds and the figures.
final class History: @unchecked Sendable {
    let clock = LogicalClock()
    let models: [WriterModel]
    private(set) var sentTotal = 0
    private(set) var acknowledgedTotal = 0
    private(set) var unacknowledgedCommitted = 0
    private(set) var unacknowledgedLost = 0
    private(set) var profilesCompared = 0
    private(set) var lastStatus: Int32? = nil
    private(set) var lastStopSeconds = 0.0
    private(set) var slowestStopSeconds = 0.0
    private var roundSent: [Int] = []
    private var roundAcknowledged: [Int] = []

    init(writers: Int, idsPerWriter: Int) {
        models = (0..<writers).map { WriterModel(index: $0, ids: idsPerWriter) }
    }

    /// Writers on their own connections until the server is stopped `how`; the server is
    /// reaped before this returns.
    func runRound(server: TestServer, seed: UInt64, stopping how: RoundEnd) throws {
        let endpoint = server.endpoint
        let pid = server.pid
        let models = self.models
        let clock = self.clock
        let signalledAt = Locked<Double>(0)
        onThreads(models.count + 1) { i in
            if i < models.count {
                models[i].write(to: endpoint, clock: clock, seed: seed &+ UInt64(i))
                return
            }
            switch how {
            case .kill(let delay):
                usleep(delay)
                kill(pid, SIGKILL)
            case .terminate(let delay):
                usleep(delay)
                signalledAt.withLock { $0 = monotonicSeconds() }
                kill(pid, SIGTERM)
            }
        }
        switch how {
        case .kill:
            lastStatus = server.stop(signal: SIGKILL)
        case .terminate:
            lastStatus = server.waitForExit(seconds: 30)
            lastStopSeconds = monotonicSeconds() - signalledAt.withLock { $0 }
            slowestStopSeconds = max(slowestStopSeconds, lastStopSeconds)
            if lastStatus == nil { server.stop(signal: SIGKILL) }
        }
        roundSent = models.map { $0.log.count - $0.roundStart }
        roundAcknowledged = models.map { m in m.log[m.roundStart...].filter(\.acknowledged).count }
    }

    /// Reads every writer's ids back from the restarted server and checks them and RECENT.
    func verify(server: TestServer, round: Int) throws {
        let afterStop = clock.tick()
        let connection = try server.connect()
        var live = 0
        for (w, model) in models.enumerated() {
            #expect(model.failures.isEmpty, "round \(round): \(model.failures.prefix(5))")
            model.failures.removeAll()
            let found = try connection.mget(model.ids.map { Array($0.utf8) })
            var stored: [String: (name: String, portraitUri: String)] = [:]
            for profile in found.compactMap({ $0 }) {
                stored[String(decoding: profile.userId, as: UTF8.self)] =
                    (String(decoding: profile.name, as: UTF8.self), String(decoding: profile.portraitUri, as: UTF8.self))
            }
            let sentBefore = model.log.count
            let settled = model.settle(against: stored, afterStopTick: afterStop)
            #expect(settled, "round \(round): writer \(w)'s ids match no prefix of its writes (sent \(roundSent[w]), acknowledged \(roundAcknowledged[w])): a lost acknowledged write, a half-applied MSET or a write out of order")
            #expect(model.failures.isEmpty, "round \(round): \(model.failures.prefix(5))")
            model.failures.removeAll()
            guard settled else { throw TestFailure("history diverged in round \(round)") }
            let kept = model.log.count - (sentBefore - roundSent[w])
            sentTotal += roundSent[w]
            acknowledgedTotal += roundAcknowledged[w]
            unacknowledgedCommitted += kept - roundAcknowledged[w]
            unacknowledgedLost += roundSent[w] - kept
            profilesCompared += model.ids.count
            live += model.committed.count
        }
        #expect(try connection.count() == live, "round \(round): COUNT disagrees with the writers' history")
        try checkRecent(connection.recent(1000), live: live, round: round)
    }

    /// RECENT lists every live profile, and never puts a write before one that was sent only
    /// after it was acknowledged (or, on one connection, sent after it).
    private func checkRecent(_ recent: [Profile], live: Int, round: Int) throws {
        #expect(recent.count == live, "round \(round): RECENT gave \(recent.count) profiles, \(live) are live")
        var producers: [(String, Producer)] = []
        for profile in recent {
            let id = String(decoding: profile.userId, as: UTF8.self)
            let writer = models.firstIndex { $0.committed[id] != nil }
            guard let writer, let model = models[writer].committed[id] else {
                Issue.record("round \(round): RECENT lists \(id), which no writer's history holds")
                continue
            }
            producers.append((id, model.producer))
        }
        for (i, (newerId, newer)) in producers.enumerated() {
            for (olderId, older) in producers[(i + 1)...] {
                if newer.writer == older.writer {
                    if newer < older {
                        Issue.record("round \(round): RECENT puts \(newerId) before \(olderId), written later on the same connection")
                        return
                    }
                    continue
                }
                let newerWrite = models[newer.writer].log[newer.index]
                let olderWrite = models[older.writer].log[older.index]
                if let done = newerWrite.doneTick, done < olderWrite.sentTick {
                    Issue.record("round \(round): RECENT puts \(newerId) before \(olderId), which was sent after \(newerId)'s write was acknowledged")
                    return
                }
            }
        }
    }
}

/// A value as the server writes it in a reply.
private func encoded(_ value: String) -> String {
    let bytes = Array(value.utf8)
    let bare = !bytes.isEmpty && !bytes.contains { $0 <= 0x20 || $0 == 0x7F || $0 == 0x22 || $0 == 0x5C }
    return bare ? value : "\"" + value + "\""
}
