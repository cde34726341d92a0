import ProfileTestSupport
import Glibc
import Testing
@testable import ProfileCache

/// Four threads hammer one cache. Each owns a key space where it is the only
/// writer, so every value it sees can be checked exactly; all share another key
/// space where thread 0 is the single writer (as the server's writer thread is)
/// and readers check that no hit is older than an acknowledged store.
@Suite struct ConcurrencyTests {
    static let threads = 4
    static let operationsPerThread = 100_000
    static let ownKeys = 200
    static let sharedKeys = 64
    static let limit = 24 << 10

    enum Outcome {
        case hit([UInt8])
        case absent
        case miss(FillTicket)
    }

    /// What the threads share besides the cache: the shared keys' "store" (the version
    /// committed and the version whose store() returned), failures, and each thread's model.
    final class Scoreboard: Sendable {
        let committed = Locked<[Int]>(Array(repeating: 0, count: ConcurrencyTests.sharedKeys))
        let acknowledged = Locked<[Int]>(Array(repeating: 0, count: ConcurrencyTests.sharedKeys))
        let failures = Locked<[String]>([])
        /// Each thread's last written version of each of its own keys; 0 means no profile.
        let ownModels = Locked<[[Int]]>(Array(repeating: [], count: ConcurrencyTests.threads))

        func fail(_ message: String) {
            failures.withLock { $0.append(message) }
        }
    }

    static func ownId(_ thread: Int, _ key: Int) -> [UInt8] { Array("t\(thread)k\(key)".utf8) }
    static func ownReply(_ thread: Int, _ key: Int, _ version: Int) -> [UInt8] {
        Array("VALUE t\(thread)k\(key) v\(version) u\n".utf8)
    }
    static func sharedId(_ key: Int) -> [UInt8] { Array("s\(key)".utf8) }
    /// Every third version is too large for a shard, so its store leaves the key uncached
    /// and a stale fill would find the place empty.
    static func sharedReply(_ key: Int, _ version: Int) -> [UInt8] {
        Array("VALUE s\(key) v\(version) ".utf8) + (version % 3 == 0 ? largeUri : [UInt8(ascii: "u")]) + [10]
    }

    static let largeUri = [UInt8](repeating: UInt8(ascii: "u"), count: limit / 4)

    static func lookup(_ cache: ProfileCache, _ id: [UInt8]) -> Outcome {
        id.withUnsafeBytes { key in
            cache.lookup(key) { outcome in
                switch outcome {
                case .hit(let profile): .hit(Array(profile.reply))
                case .absent: .absent
                case .miss(let ticket): .miss(ticket)
                }
            }
        }
    }

    /// The version in a shared reply, checking that the reply belongs to `key`.
    static func version(in reply: [UInt8], key: Int) -> Int? {
        let text = String(decoding: reply, as: UTF8.self)
        let prefix = "VALUE s\(key) v"
        guard text.hasPrefix(prefix), text.hasSuffix(" u\n") else { return nil }
        return Int(text.dropFirst(prefix.count).dropLast(3)).flatMap { $0 % 3 == 0 ? nil : $0 }
    }

    static func work(thread: Int, cache: ProfileCache, shared: Scoreboard) {
        var random = SeededGenerator(seed: UInt64(thread + 1) &* 0x9e37_79b9)
        var model = Array(repeating: 0, count: ownKeys)
        var nextVersion = 1
        for _ in 0..<operationsPerThread {
            let roll = Int.random(in: 0..<100, using: &random)
            if roll % 8 == 0 {
                // Prefetches race the other threads' stores and fills; they must change nothing.
                cache.prefetch([ownId(thread, roll), sharedId(roll % sharedKeys), sharedId(roll / 2), ownId(thread, roll + 1)])
            }
            if roll < 35 {
                let key = Int.random(in: 0..<ownKeys, using: &random)
                switch lookup(cache, ownId(thread, key)) {
                case .hit(let reply):
                    if model[key] == 0 || reply != ownReply(thread, key, model[key]) {
                        shared.fail("thread \(thread) key \(key): hit \(String(decoding: reply, as: UTF8.self)), wrote v\(model[key])")
                    }
                case .absent:
                    if model[key] != 0 { shared.fail("thread \(thread) key \(key): absent, wrote v\(model[key])") }
                case .miss(let ticket):
                    let row = model[key] == 0 ? nil : ownReply(thread, key, model[key])
                    ownId(thread, key).withUnsafeBytes { id in
                        if let row {
                            row.withUnsafeBytes { cache.fill(id, profile: encodedProfile($0), ticket: ticket) }
                        } else {
                            cache.fill(id, profile: nil, ticket: ticket)
                        }
                    }
                }
            } else if roll < 50 {
                let key = Int.random(in: 0..<ownKeys, using: &random)
                let absent = Int.random(in: 0..<5, using: &random) == 0
                model[key] = absent ? 0 : nextVersion
                nextVersion += 1
                cache.store(ownId(thread, key), absent ? nil : ownReply(thread, key, model[key]))
            } else if roll < 75 || thread != 0 {
                let key = Int.random(in: 0..<sharedKeys, using: &random)
                let acknowledged = shared.acknowledged.withLock { $0[key] }
                switch lookup(cache, sharedId(key)) {
                case .hit(let reply):
                    guard let version = version(in: reply, key: key), version >= acknowledged else {
                        shared.fail("shared \(key): hit \(String(decoding: reply, as: UTF8.self)) after v\(acknowledged)")
                        continue
                    }
                case .absent:
                    if acknowledged != 0 { shared.fail("shared \(key): absent after v\(acknowledged)") }
                case .miss(let ticket):
                    let committed = shared.committed.withLock { $0[key] }
                    // A slow store read: give the writer time to commit and store a newer version.
                    sched_yield()
                    cache.fill(sharedId(key), committed == 0 ? nil : sharedReply(key, committed), ticket)
                }
            } else {
                let key = Int.random(in: 0..<sharedKeys, using: &random)
                let version = shared.committed.withLock { $0[key] += 1; return $0[key] }
                cache.store(sharedId(key), sharedReply(key, version))
                shared.acknowledged.withLock { $0[key] = version }
            }
        }
        shared.ownModels.withLock { $0[thread] = model }
    }

    @Test func threadsSharingTheCacheNeverSeeStaleOrForeignValues() {
        let cache = ProfileCache(limitBytes: Self.limit, shardCount: 8)
        let shared = Scoreboard()
        onThreads(Self.threads) { thread in
            Self.work(thread: thread, cache: cache, shared: shared)
        }
        #expect(shared.failures.withLock { $0 } == [])

        let models = shared.ownModels.withLock { $0 }
        for thread in 0..<Self.threads {
            for key in 0..<Self.ownKeys {
                let version = models[thread][key]
                switch Self.lookup(cache, Self.ownId(thread, key)) {
                case .hit(let reply): #expect(version != 0 && reply == Self.ownReply(thread, key, version))
                case .absent: #expect(version == 0)
                case .miss: break
                }
            }
        }
        let committed = shared.committed.withLock { $0 }
        for key in 0..<Self.sharedKeys {
            switch Self.lookup(cache, Self.sharedId(key)) {
            case .hit(let reply): #expect(Self.version(in: reply, key: key) == committed[key] && committed[key] % 3 != 0)
            case .absent: #expect(committed[key] == 0)
            case .miss: break
            }
        }

        let statistics = cache.statistics
        #expect(statistics.bytes <= Self.limit)
        #expect(statistics.evictions > 0)
        #expect(statistics.items > 0)
        #expect(cache.integrityViolations() == [])
    }
}
