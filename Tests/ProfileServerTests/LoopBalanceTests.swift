import ProfileTestSupport
import Glibc
import ProfileClient
@testable import ProfileServer
import Testing

/// Connections moving between the workers' event loops: when the policy moves them, and that a
/// moved connection goes on exactly where it was.
@Suite struct LoopBalanceTests {
    /// Moves on every tick, both ways: workers 1... hand every idle connection to worker 0,
    /// which hands half of them back out.
    static let restless = LoopPolicy(tickMilliseconds: 1, requestsPerSleepToGather: 1 << 40, gatherRoomPermille: .max,
                                     spreadBusyPermille: 0, spreadIdleMillicores: .min,
                                     firstHoldMilliseconds: 0, maxHoldMilliseconds: 0)

    @Test func wakeUpBoundLoopsGatherAndPipelinedOnesStay() {
        let policy = LoopPolicy.standard
        // Pipeline 1 on two loops measured about 2 requests per sleep; pipeline 16, about 90.
        #expect(policy.shouldGather(requests: 2_200, sleeps: 1_000, firstBusyPermille: 470, holding: false))
        #expect(!policy.shouldGather(requests: 90_000, sleeps: 1_000, firstBusyPermille: 470, holding: false))
        // An idle loop's connections gather too: its sleeps are its ticks.
        #expect(policy.shouldGather(requests: 0, sleeps: 1, firstBusyPermille: 0, holding: false))
        #expect(!policy.shouldGather(requests: 2_200, sleeps: 1_000, firstBusyPermille: 900, holding: false))
        #expect(!policy.shouldGather(requests: 2_200, sleeps: 1_000, firstBusyPermille: 470, holding: true))
    }

    @Test func aSaturatedFirstLoopSpreadsOnlyWhenCoresAreIdle() {
        let policy = LoopPolicy.standard
        #expect(policy.shouldSpread(busyPermille: 970, idleMillicores: 800))
        #expect(!policy.shouldSpread(busyPermille: 970, idleMillicores: 100))
        #expect(!policy.shouldSpread(busyPermille: 600, idleMillicores: 1_000))
    }

    @Test func eachSpreadHoldsGatheringTwiceAsLongUpToTheCap() {
        let policy = LoopPolicy.standard
        var hold = 0
        var holds: [Int] = []
        for _ in 0..<9 {
            hold = policy.nextHold(after: hold)
            holds.append(hold)
        }
        #expect(holds == [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000])
    }

    @Test func idleTimeIsReadFromTheFirstLineOfProcStat() {
        func idle(_ text: String) -> Int? {
            let bytes = Array(text.utf8)
            return bytes.withUnsafeBufferPointer { MachineIdle.idleTicks(inStat: $0) }
        }
        #expect(idle("cpu  10 20 30 400 50 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n") == 450)
        #expect(idle("cpu  1 2 3 4\ncpu0 1 2 3 4 5\n") == nil)
        #expect(idle("intr 1 2 3 4 5\n") == nil)
        // Cut off by the read: the fifth number may be incomplete, so it is not taken.
        #expect(idle("cpu  10 20 30 400 5") == nil)
    }

    /// Under the standard policy, connections that wait for requests end up on worker 0.
    @Test func idleConnectionsGatherOnTheFirstWorker() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        var policy = LoopPolicy.standard
        policy.tickMilliseconds = 10
        let server = try InProcessServer(path: directory + "/p.db", workers: 2, loopPolicy: policy)
        let clients = try (0..<4).map { _ in try server.connect() }
        for client in clients { try client.ping() }
        // Two of the four went to worker 1; worker 0, idle, never hands any out. STATS counts
        // the moves (from a fifth connection, which may move too once it is idle).
        let observer = try server.connect()
        func moves() -> Int {
            (try? observer.stats().first { $0.name == "loop_moves" }.flatMap { Int($0.value) }) ?? -1
        }
        let deadline = monotonicSeconds() + 10
        while moves() < 2 && monotonicSeconds() < deadline { usleep(5_000) }
        usleep(100_000)
        #expect(moves() == 2)
        for client in clients { try client.ping() }
        server.stop()
    }

    /// Connections moved back and forth every millisecond, between and around pipelined
    /// writes, reads and a table read, lose no request and keep every reply in order; the
    /// stop then closes them all, wherever they are.
    @Test func connectionsMovedAllTheTimeAnswerEverythingInOrder() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let server = try InProcessServer(path: directory + "/p.db", workers: 3, loopPolicy: Self.restless)
        let clients = try (0..<6).map { _ in try server.connect() }
        let failures = Tally()
        let rounds = 60
        nonisolated(unsafe) let shared = clients
        onThreads(clients.count) { i in
            let c = shared[i]
            do {
                for round in 0..<rounds {
                    let id = "c\(i)"
                    c.send("SET", [id, "name \(round)", "uri \(round)"])
                    c.send("GET", [id])
                    c.send("UPDATE", [id, "name", "renamed \(round)"])
                    c.send("MGET", [id, "nobody"])
                    c.send("PING")
                    if round % 20 == 0 { c.send("COUNT") }
                    try c.flush()
                    var expected = ["STORED", "VALUE c\(i) \"name \(round)\" \"uri \(round)\"", "UPDATED",
                                    "VALUE c\(i) \"renamed \(round)\" \"uri \(round)\"", "NOTFOUND nobody", "END", "PONG"]
                    if round % 20 == 0 { expected.append("COUNT \(i + 1)") }
                    var got: [String] = []
                    for _ in expected { got.append(String(decoding: try c.readLine(), as: UTF8.self)) }
                    let ok = got.prefix(7) == expected.prefix(7) && (got.count == 7 || got[7].hasPrefix("COUNT "))
                    if !ok {
                        failures.add()
                        return
                    }
                }
            } catch {
                failures.add()
            }
        }
        #expect(failures.count == 0)
        #expect(server.loops.moves.load(ordering: .relaxed) >= 20)
        #expect(try server.connect().count() == clients.count)
        server.stop()
        for client in clients { #expect(try client.isClosedByServer()) }
    }

    /// Tracking clients that move between loops while idle get every invalidation: one made
    /// while a connection is in transit waits for the worker that takes it.
    @Test func trackingClientsMovedAllTheTimeGetEveryPush() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let server = try InProcessServer(path: directory + "/p.db", workers: 3, loopPolicy: Self.restless)
        let readers = try (0..<3).map { _ in try server.connectRESP() }
        for reader in readers {
            #expect(try reader.call("HELLO", "3").hasPrefix("%8\r\n"))
            #expect(try reader.call("CLIENT", "TRACKING", "ON") == "+OK\r\n")
        }
        let writer = try server.connect()
        for round in 0..<40 {
            for (index, reader) in readers.enumerated() {
                #expect(try reader.call("HGET", "k\(index)", "name") == (round == 0 ? "_\r\n" : "$\(String(round - 1).count)\r\n\(round - 1)\r\n"))
            }
            usleep(2000)
            for index in readers.indices { try writer.set(Profile(userId: "k\(index)", name: "\(round)", portraitUri: "u")) }
            for (index, reader) in readers.enumerated() {
                #expect(try reader.reply() == ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk\(index)\r\n")
            }
        }
        #expect(server.loops.moves.load(ordering: .relaxed) >= 20)
        server.stop()
    }
}
