import Glibc
import ProfileClient
@testable import ProfileServer
import ProfileStore
import ProfileSystem
import ProfileTestSupport
import Testing

/// Where writes commit: in the submitting worker's thread while a commit is prompt (nobody
/// else committing, no backpressure, no sync at each commit), on the writer thread
/// otherwise; each connection's replies in request order either way.
@Suite struct PromptCommitTests {
    @Test func aPromptCommitRunsInTheWorkersThreadAndAnotherOnTheWriters() throws {
        try withRecordedCommits(workers: 1) { server, recorder in
            let client = try server.connect()
            recorder.prompt(true)
            #expect(try client.roundTrip("SET a ay au\n") == "STORED")
            recorder.prompt(false)
            #expect(try client.roundTrip("SET b bee bu\n") == "STORED")
            #expect(recorder.threads == ["worker-0", "writer"])
            #expect(try client.roundTrip("GET a\n") == "VALUE a ay au")
            #expect(try client.roundTrip("GET b\n") == "VALUE b bee bu")
        }
    }

    @Test func repliesKeepOrderWhileCommitsMoveBetweenTheWorkersAndTheWriter() throws {
        try withRecordedCommits(workers: 2) { server, recorder in
            // Each thread uses only its own connection.
            nonisolated(unsafe) let clients = try (0..<4).map { _ in try server.connect() }
            let stop = Atomic(false)
            // Promptness flips all the time, so commits keep moving between threads.
            let flipper = startThread("flipper") {
                var prompt = false
                while !stop.value {
                    prompt.toggle()
                    recorder.prompt(prompt)
                    usleep(200)
                }
            }
            defer {
                stop.value = true
                pthread_join(flipper, nil)
            }
            let rounds = 100
            let failures = Locked<[String]>([])
            onThreads(clients.count) { c in
                let client = clients[c]
                do {
                    for round in 0..<rounds {
                        // Each round: a write of the client's own id, a read of it and of
                        // another client's id, pipelined.
                        client.sendRaw(Array("SET c\(c) v\(round) u\nGET c\(c)\nEXISTS c\((c + 1) % 4)\nSET d\(c) w\(round) u\n".utf8))
                        try client.flush()
                        let replies = try (0..<4).map { _ in try client.line() }
                        let exists = replies[2]
                        if replies[0] != "STORED" || replies[1] != "VALUE c\(c) v\(round) u"
                            || (exists != "YES" && exists != "NO") || replies[3] != "STORED" {
                            failures.withLock { $0.append("client \(c) round \(round): \(replies)") }
                            return
                        }
                    }
                } catch {
                    failures.withLock { $0.append("client \(c): \(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [])
            let threads = Set(recorder.threads)
            #expect(threads.contains("writer"))
            #expect(threads.contains("worker-0") || threads.contains("worker-1"))
        }
    }

    private func withRecordedCommits(workers: Int, _ body: (InProcessServer, CommitRecorder) throws -> Void) throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let recorder = CommitRecorder()
        let server = try InProcessServer(path: directory + "/profiles.sqlite3", workers: workers,
                                         wrapWritePath: { recorder.wrap($0) })
        defer { server.stop() }
        try body(server, recorder)
    }
}

/// A flag several threads share.
private final class Atomic: @unchecked Sendable {
    private let state: Locked<Bool>
    init(_ value: Bool) { state = Locked(value) }
    var value: Bool {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}

/// Notes the name of the thread each commit runs on, and lets a commit be prompt only when the
/// test says so. Any thread.
private final class CommitRecorder: @unchecked Sendable {
    private let state = Locked((prompt: false, threads: [String]()))

    func prompt(_ prompt: Bool) { state.withLock { $0.prompt = prompt } }
    var threads: [String] { state.withLock { $0.threads } }
    var isPrompt: Bool { state.withLock { $0.prompt } }

    func wrap(_ path: any ProfileWritePath) -> any ProfileWritePath {
        InterposedWritePath(path, beforeCommit: { self.noteCommit() }, isPrompt: { self.isPrompt })
    }

    private func noteCommit() {
        let name = readText("/proc/thread-self/comm").trimmingSuffix("\n")
        state.withLock { $0.threads.append(name) }
    }
}

private extension String {
    func trimmingSuffix(_ suffix: String) -> String { hasSuffix(suffix) ? String(dropLast(suffix.count)) : self }
}
