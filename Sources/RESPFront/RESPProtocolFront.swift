import ProfileServer
import CLibevent
import RESPProtocol
import ProfileSystem
import Synchronization

/// RESP as the server registers it (docs/RESP.md): its listeners' refusal, its sessions, and
/// what every worker's `RESPWorkerFront` shares: how keys name profiles, SCAN's cursors, and who
/// read what for client-side caching.
///
/// Immutable but for the port and its members, which are thread-safe: any thread may use it.
package final class RESPProtocolFront: Front {
    /// How RESP keys name profiles (`--resp-key-prefix`).
    let keyspace: RESPKeyspace
    /// SCAN's cursors: a scan may go on over any connection.
    let scanCursors = ScanCursors()
    /// Who read what, for client-side caching (CLIENT TRACKING); the server's change feed.
    let tracking: ClientTracking
    /// What a request may hold.
    let limits = RESPLimits()
    /// INFO's `tcp_port`: the plain listener's, or the TLS one's when it is alone.
    private let portBound = Atomic<Int>(0)

    package init(keyPrefix: [UInt8], trackingTableMaxKeys: Int) {
        keyspace = RESPKeyspace(prefix: keyPrefix)
        tracking = ClientTracking(maxKeys: trackingTableMaxKeys, keyPrefix: keyPrefix)
    }

    var port: Int { portBound.load(ordering: .relaxed) }

    package var logFields: [(key: String, value: String)] { [("proto", "resp")] }

    package var busyReply: [UInt8] {
        var bytes = [UInt8](repeating: 0, count: RESPEncoder.errorCount(RESPText.maxClients))
        _ = bytes.withUnsafeMutableBytes { RESPEncoder.writeError(RESPText.maxClients, to: $0.baseAddress!) }
        return bytes
    }

    package var changeFeed: (any ChangeFeed)? { tracking }

    package func makeWorkerFront(for worker: Worker) -> any WorkerFront {
        RESPWorkerFront(processor: worker.processor, shared: self)
    }

    package func makeSession(id: Int) -> any FrontSession {
        RESPSession(id: id, inputLimit: limits.receiveBufferBytes, tracking: tracking)
    }

    package func bound(port: Int, tls: Bool) {
        // The plain listener is bound first, when there is one.
        if !tls || self.port == 0 { portBound.store(port, ordering: .relaxed) }
    }
}

extension RESPWorkerFront {
    /// RESP replies are made whole: none is left unfinished.
    func resume(_ connection: Connection) -> Bool { true }

    /// The invalidations a write made for its own connection go before its reply, so a client
    /// cache never serves the old value after the write is acknowledged.
    func beforeAnswer(of job: WriteJob, on connection: Connection) {
        if job.changeOrigin != 0 && shared.tracking.isActive { writePushes(of: connection.resp.tracking, to: connection) }
    }

    /// Writes the pushes client-side caching made for a connection of `worker`, this front's,
    /// and sends them, before the writes that made them are acknowledged.
    func deliverPushes(_ client: TrackingClient, to connection: Connection, on worker: Worker) {
        // Taken only while this worker holds the connection: else the worker it moved to does.
        guard let taken = shared.tracking.takePending(client, on: worker) else { return }
        // On the socket (or behind replies the client has not read), or dropped with the
        // connection: the writes may be acknowledged.
        defer { for notices in taken.notices { notices.sent() } }
        // A pass even with no pushes: it sends what the socket did not take of one sent
        // straight to it (`PushOutlet`).
        guard connection.phase != .closed else { return }
        processor.beginPass(at: monotonicNanos())
        writePushes(taken.pushes, to: connection)
        worker.finishPass(connection)
    }

    /// The pushes made for the connection of a write being answered: written before its
    /// answer, in the same pass, so they reach the socket first.
    private func writePushes(of client: TrackingClient, to connection: Connection) {
        guard let taken = shared.tracking.takePending(client, on: connection.worker) else { return }
        writePushes(taken.pushes, to: connection)
        for notices in taken.notices { notices.sent() }
    }

    /// Writes the pushes now; when reads of the connection are unanswered, again after their
    /// replies, which may carry values read before the changes.
    private func writePushes(_ pushes: [[UInt8]], to connection: Connection) {
        let repeated = connection.hasReadsUnanswered
        for push in pushes {
            if repeated { push.withUnsafeBytes { connection.repeatOnceReadsAreAnswered($0) } }
            processor.reserve(push.count, connection)
            push.withUnsafeBytes { bytes in
                if processor.out.remaining >= bytes.count {
                    processor.out.end.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
                    processor.out.count += bytes.count
                } else {
                    // Larger than the scratch, which `reserve` emptied into the connection's output.
                    evbuffer_add(connection.output, bytes.baseAddress!, bytes.count)
                }
            }
        }
    }
}
