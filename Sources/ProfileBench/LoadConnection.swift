import Glibc
import ProfileTLS

/// One connection of a load thread: its socket, the bytes going out and coming in, and the
/// requests in flight in the order their replies will come.
///
/// Used by one thread at a time: the thread that opens it, then the load thread it is handed to.
///
/// Its mutable fields are `@exclusivity(unchecked)`: only the owning thread touches them, and
/// the runtime's dynamic exclusivity checks were a third of the load loop's instructions.
final class LoadConnection: @unchecked Sendable {
    let fd: Int32
    /// The TLS session every byte passes through; nil in clear.
    let tls: TLSSession?
    let output = ByteBuffer(capacity: 1 << 16)
    let input = ByteBuffer(capacity: 1 << 16)
    /// Whether poll also waits for write readiness (only while bytes are left to send).
    @exclusivity(unchecked) var watchingWrites = false

    // The in-flight requests: a ring of statistics slot, ids covered and start time.
    @exclusivity(unchecked) private var slots: [UInt8]
    @exclusivity(unchecked) private var keyCounts: [Int32]
    @exclusivity(unchecked) private var starts: [UInt64]
    private let mask: Int
    /// Requests this connection keeps in flight in the current phase (at most the ring's size).
    @exclusivity(unchecked) var pipeline: Int
    @exclusivity(unchecked) private var head = 0
    @exclusivity(unchecked) private(set) var inFlight = 0

    init(fd: Int32, tls: TLSSession?, pipeline: Int, ringSize: Int) {
        self.fd = fd
        self.tls = tls
        self.pipeline = pipeline
        var capacity = 1
        while capacity < max(pipeline, ringSize) { capacity <<= 1 }
        mask = capacity - 1
        slots = [UInt8](repeating: 0, count: capacity)
        keyCounts = [Int32](repeating: 0, count: capacity)
        starts = [UInt64](repeating: 0, count: capacity)
    }

    deinit {
        tls?.shutdown()
        close(fd)
    }

    /// Reads what has arrived, as `recv` reports it (through TLS when on).
    @inline(__always)
    func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> Int {
        guard let tls else { return recv(fd, buffer, count, 0) }
        return tls.receive(into: buffer, count: count)
    }

    /// Sends what the socket takes now, as `send` reports it (through TLS when on). After
    /// EAGAIN over TLS the next call must offer the same bytes first, which `output` does: it
    /// only grows at its end until bytes are sent.
    @inline(__always)
    func send(_ bytes: UnsafeRawPointer, count: Int) -> Int {
        guard let tls else { return Glibc.send(fd, bytes, count, Int32(MSG_NOSIGNAL)) }
        return tls.send(bytes, count: count)
    }

    /// Decrypted bytes the socket will not signal again.
    var hasBufferedInput: Bool { tls?.hasBufferedInput ?? false }

    var hasRoom: Bool { inFlight < pipeline }

    @inline(__always)
    func push(slot: Int, keys: Int, start: UInt64) {
        let i = (head + inFlight) & mask
        slots[i] = UInt8(slot)
        keyCounts[i] = Int32(keys)
        starts[i] = start
        inFlight += 1
    }

    @inline(__always)
    var front: (slot: Int, keys: Int, start: UInt64) {
        (Int(slots[head]), Int(keyCounts[head]), starts[head])
    }

    @inline(__always)
    func pop() {
        head = (head + 1) & mask
        inFlight -= 1
    }
}
