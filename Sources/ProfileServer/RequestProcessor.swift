import CLibevent
import Glibc
import ProfileCache
import ProfileModel
import ProfileStore
import ProfileSystem

/// The request path every front shares, for one worker: it serves a connection's input
/// (`serve`: order, role, lookups, fetches, take-back), with the reply scratch and its budget,
/// the cache and the store's reads (`WorkerReads`), writes handed to the writer, reads queued
/// for the fetchers, and the pass's counters. It names no protocol: a front (`WorkerFront`)
/// decodes each request and says what it is, and encodes each answer into the scratch.
///
/// Owned by its worker and used by that worker's thread only.
public final class RequestProcessor {
    /// The worker's index, for its statistics and latency.
    package let index: Int
    package let context: ServerContext
    /// The configuration's limits the request path reads on every request, copied here: a
    /// front in another module would otherwise copy the whole configuration to read one.
    /// `--output-high-water`: the unsent replies past which a connection is not answered.
    @usableFromInline package let outputHighWater: Int
    /// The most reply bytes one pass over a connection makes before it yields to the others
    /// (`repliesMustPause`): 128 KiB, a few hundred microseconds of encoding and copying, so
    /// that 200 connections each reading megabytes of MGET replies delay another client's GET
    /// by tens of milliseconds, not hundreds. Smaller than the scratch, so that a pass never
    /// spills its replies into the connection's queue before it pauses.
    @usableFromInline package let replyBytesPerPass = 128 << 10
    /// How many requests one pass over a connection answers at most.
    @usableFromInline package let requestsPerWakeup: Int
    public var out: ReplyBuffer
    @usableFromInline package var counters = RequestCounters()
    /// How this worker reads what the cache misses.
    package let reads: any WorkerReads
    package var jobs: [WriteJob] = []
    /// Reads of a shared store this pass made, for the fetchers.
    package var fetchJobs: [ReadJob] = []
    @usableFromInline package let cache: ProfileCache
    /// Where a row read from the store for the cache alone (not into a reply) is encoded for
    /// it: room for the cache's longest encoding.
    @usableFromInline package let valueScratch: UnsafeMutableRawPointer
    /// The ids a front's look-ahead gathers over a pass's pipelined reads, so that the cache's
    /// memory misses for all of them overlap (`ProfileCache.prefetch`); reused by every pass.
    public let lookahead: UnsafeMutableBufferPointer<PrefetchSlot>
    /// How many ids one look-ahead gathers, and how many requests it reads at most: two
    /// pipelines of 16 GETs, or two MGETs of 16.
    package static let lookaheadSlots = 32
    /// When the current pass over a connection began, and how many requests of each kind it
    /// answered: the pass's duration is each one's latency (bytes read to reply handed over).
    private(set) var passStart = 0
    /// Whether the cache may answer during the current pass: a shared store's lease, asked once
    /// per pass (`beginPass`); a store of this server's own always lets it.
    @usableFromInline package private(set) var cacheVouched = true
    @usableFromInline package var passKindCounts = [Int](repeating: 0, count: RequestKind.allCases.count)
    /// Bit n set: `passKindCounts[n]` is not zero (so a pass visits only the kinds it served).
    @usableFromInline package var passKindsSeen: UInt32 = 0
    /// Requests answered since the start, for `LoopSampler`.
    package var requestsAnswered = 0

    package init(index: Int, context: ServerContext, reads: any WorkerReads) {
        self.index = index
        self.context = context
        outputHighWater = context.configuration.outputHighWater
        requestsPerWakeup = context.configuration.requestsPerWakeup
        self.reads = reads
        cache = context.cache
        precondition(RequestKind.allCases.count <= UInt32.bitWidth, "passKindsSeen has a bit per kind")
        out = ReplyBuffer(capacity: 256 << 10)
        lookahead = .allocate(capacity: Self.lookaheadSlots)
        valueScratch = .allocate(byteCount: context.cacheEncoding.capacity, alignment: 16)
    }

    deinit {
        lookahead.deallocate()
        valueScratch.deallocate()
    }

    /// Starts a pass at `now`: the one place the request path asks whether the cache may
    /// answer (a shared store's lease), for the whole pass.
    package func beginPass(at now: Int) {
        passStart = now
        cacheVouched = reads.cacheMayAnswer(at: now)
    }

    package func recordPassLatency() {
        let elapsed = monotonicNanos() - passStart
        let latency = context.latency[index]
        while passKindsSeen != 0 {
            let raw = passKindsSeen.trailingZeroBitCount
            passKindsSeen &= passKindsSeen - 1
            latency.record(RequestKind(rawValue: UInt8(raw))!, nanos: elapsed, count: passKindCounts[raw])
            requestsAnswered += passKindCounts[raw]
            passKindCounts[raw] = 0
        }
    }

    /// Moves the replies built so far into the connection's queue to make room. Nothing leaves
    /// the queue while a request is served, so its reply can still be taken back (`takeBack`).
    @usableFromInline package func spill(_ connection: Connection) {
        evbuffer_add(connection.output, out.base, out.count)
        out.count = 0
    }
}
