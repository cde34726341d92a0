import CLibevent
import CLinux
import Glibc
import Synchronization

/// When connections move between event loops.
///
/// A loop that sleeps after every request or two (clients at pipeline 1) spends more CPU on
/// going to sleep and being woken than on requests: on 2 shared cores, two such loops served
/// GET at pipeline 1 at 58,000 to 65,000/s where one loop, never idle, served 89,000 to
/// 95,000/s. Loops with work to spare per wake-up (pipelined clients) gain from being many.
/// So a worker whose wake-ups carry few requests hands its connections to worker 0 while
/// worker 0 has room, and worker 0, once saturated while the machine has idle cores, hands
/// half of them back out, and gathering then waits, twice as long after every spread (so a
/// load that needs every loop does not keep bouncing).
///
/// A plain value; any thread may read it.
struct LoopPolicy: Sendable {
    /// How often each worker samples its load and may move connections.
    var tickMilliseconds = 250
    /// Below this many requests per sleep, a worker's wake-ups cost more than its requests.
    var requestsPerSleepToGather = 4
    /// Worker 0 takes connections while its busy share of the last tick (thousandths) is below this.
    var gatherRoomPermille = 850
    /// Worker 0 hands connections out when its busy share reaches this ...
    var spreadBusyPermille = 900
    /// ... and the machine had at least this many idle cores (thousandths) over the tick.
    var spreadIdleMillicores = 500
    /// After a spread, gathering waits this long, doubled after every spread, up to `maxHoldMilliseconds`.
    var firstHoldMilliseconds = 5_000
    var maxHoldMilliseconds = 300_000

    static let standard = LoopPolicy()

    /// Whether a worker other than 0 should hand its connections to worker 0.
    func shouldGather(requests: Int, sleeps: Int, firstBusyPermille: Int, holding: Bool) -> Bool {
        !holding && firstBusyPermille < gatherRoomPermille && requests < requestsPerSleepToGather * max(sleeps, 1)
    }

    /// Whether worker 0 should hand half its connections to the others.
    func shouldSpread(busyPermille: Int, idleMillicores: Int) -> Bool {
        busyPermille >= spreadBusyPermille && idleMillicores >= spreadIdleMillicores
    }

    /// The hold after a spread, given the one before (0 for none).
    func nextHold(after previous: Int) -> Int {
        previous == 0 ? firstHoldMilliseconds : min(previous * 2, maxHoldMilliseconds)
    }
}

/// What one worker publishes about its loop at each tick.
///
/// Written by its worker; any thread may read it.
final class LoopLoad: Sendable {
    /// Busy share of the last tick, in thousandths of a core.
    let busyPermille = Atomic<Int>(0)
}

/// What the workers publish to each other about their loops.
///
/// Each worker writes its own `LoopLoad`; any thread may read everything.
final class LoopLoads: Sendable {
    /// In worker order.
    let workers: [LoopLoad]
    /// Monotonic nanoseconds before which no worker gathers (worker 0 sets it when it spreads).
    let gatherHoldUntil = Atomic<Int>(0)
    /// Connections handed from one worker to another since the start.
    let moves = Atomic<Int>(0)

    init(workerCount: Int) {
        workers = (0..<workerCount).map { _ in LoopLoad() }
    }
}

/// One worker's load between two ticks: CPU time (busy share), sleeps and requests.
///
/// Owned by its worker's thread.
struct LoopSampler {
    private var wall = 0
    private var cpu = 0
    private var sleeps = 0
    private var requests = 0

    struct Delta {
        var busyPermille: Int
        var sleeps: Int
        var requests: Int
    }

    /// Samples the calling thread; the first call measures from the thread's start.
    mutating func take(now: Int, requests: Int) -> Delta {
        var usage = rusage()
        profiled_thread_usage(&usage)
        let cpu = nanos(usage.ru_utime) + nanos(usage.ru_stime)
        let sleeps = usage.ru_nvcsw
        let wall = max(1, now - self.wall)
        defer { (self.wall, self.cpu, self.sleeps, self.requests) = (now, cpu, sleeps, requests) }
        return Delta(busyPermille: (cpu - self.cpu) * 1000 / wall, sleeps: sleeps - self.sleeps,
                     requests: requests - self.requests)
    }

    private func nanos(_ t: timeval) -> Int { t.tv_sec * 1_000_000_000 + t.tv_usec * 1000 }
}

/// Idle cores of the whole machine between two samples, from the first line of /proc/stat.
///
/// Owned by worker 0's thread.
struct MachineIdle {
    private var wall = 0
    private var idleTicks = 0
    private let ticksPerSecond = sysconf(Int32(_SC_CLK_TCK))

    /// Thousandths of a core that were idle since the last call; 0 when unknown.
    mutating func take(now: Int) -> Int {
        guard let idle = Self.idleTicks(), ticksPerSecond > 0 else { return 0 }
        defer { (wall, idleTicks) = (now, idle) }
        guard wall > 0, now > wall else { return 0 }
        return (idle - idleTicks) * 1_000_000_000 / ticksPerSecond * 1000 / (now - wall)
    }

    /// idle + iowait from /proc/stat, in clock ticks.
    private static func idleTicks() -> Int? {
        let fd = open("/proc/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { buffer -> Int? in
            let n = read(fd, buffer.baseAddress, buffer.count)
            return n > 0 ? idleTicks(inStat: UnsafeBufferPointer(rebasing: buffer[..<n])) : nil
        }
    }

    /// idle + iowait, the 4th and 5th numbers of the first line, "cpu  user nice system idle iowait ...".
    static func idleTicks(inStat stat: UnsafeBufferPointer<UInt8>) -> Int? {
        guard stat.count > 4, stat[0] == UInt8(ascii: "c"), stat[3] == UInt8(ascii: " ") else { return nil }
        var field = 0, value = 0, total = 0, inNumber = false
        for byte in stat[4...] {
            if byte >= 0x30 && byte <= 0x39 {
                value = value * 10 + Int(byte - 0x30)
                inNumber = true
                continue
            }
            if byte == 0x0A && !inNumber { return nil }
            guard inNumber else { continue }
            field += 1
            if field == 4 || field == 5 { total += value }
            if field == 5 { return total }
            if byte == 0x0A { return nil }
            value = 0
            inNumber = false
        }
        return nil
    }
}
