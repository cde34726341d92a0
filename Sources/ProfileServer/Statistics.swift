import Glibc
import Synchronization

/// The counters one worker thread keeps while it serves requests.
///
/// Plain integers, touched only by the owning worker; `WorkerStatistics.publish` copies them
/// into atomics once per wake-up so that STATS on any thread can read them without a lock
/// and without a read-modify-write on the request path.
@usableFromInline package struct RequestCounters {
    package init() {}
    @usableFromInline package var getLookups = 0
    @usableFromInline package var getHits = 0
    @usableFromInline package var getMisses = 0
    @usableFromInline package var cacheHits = 0
    @usableFromInline package var cacheMisses = 0
    package var errors = 0
    /// Lookups of a shared store that bypassed the cache because its lease had run out.
    package var leaseExpiredReads = 0
}

/// Published copies of one worker's counters.
///
/// Written by the owning worker only; read by any thread.
package final class WorkerStatistics: Sendable {
    package let getLookups = Atomic<Int>(0)
    package let getHits = Atomic<Int>(0)
    package let getMisses = Atomic<Int>(0)
    package let cacheHits = Atomic<Int>(0)
    package let cacheMisses = Atomic<Int>(0)
    package let errors = Atomic<Int>(0)
    package let leaseExpiredReads = Atomic<Int>(0)

    package func publish(_ c: RequestCounters) {
        getLookups.store(c.getLookups, ordering: .relaxed)
        getHits.store(c.getHits, ordering: .relaxed)
        getMisses.store(c.getMisses, ordering: .relaxed)
        cacheHits.store(c.cacheHits, ordering: .relaxed)
        cacheMisses.store(c.cacheMisses, ordering: .relaxed)
        errors.store(c.errors, ordering: .relaxed)
        leaseExpiredReads.store(c.leaseExpiredReads, ordering: .relaxed)
    }
}

/// Server-wide counters touched off the request path (accept, close, commit).
///
/// Thread-safe: any thread may update or read them.
package final class ServerStatistics: Sendable {
    package let startTime: timespec
    package let currentConnections = Atomic<Int>(0)
    package let totalConnections = Atomic<Int>(0)
    package let profilesWritten = Atomic<Int>(0)
    package let profilesDeleted = Atomic<Int>(0)
    package let refusedErrors = Atomic<Int>(0)
    /// What every client connection holds (received input not yet handled, unsent replies,
    /// replies held for order, queued transactions), as each connection last accounted it.
    package let clientMemoryBytes = Atomic<Int>(0)
    /// About the most `clientMemoryBytes` reached since the freed memory was last given back to
    /// the system (workers raise it as they account; the acceptor lowers it when it trims).
    package let clientMemoryPeak = Atomic<Int>(0)
    /// Connections closed because the clients' memory went past `--max-client-memory`.
    package let clientEvictions = Atomic<Int>(0)
    /// TLS handshakes completed, failed (refused certificates, versions, plain bytes) and
    /// cut off at `--tls-handshake-timeout`.
    package let tlsHandshakes = Atomic<Int>(0)
    package let tlsHandshakeFailures = Atomic<Int>(0)
    package let tlsHandshakeTimeouts = Atomic<Int>(0)
    /// SIGHUP reloads of the TLS files that failed, and whether the last one did (1) or not (0).
    package let tlsReloadFailures = Atomic<Int>(0)
    package let tlsReloadFailed = Atomic<Int>(0)

    package init() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        startTime = now
    }

    package var uptimeSeconds: Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return max(0, now.tv_sec - startTime.tv_sec)
    }
}
