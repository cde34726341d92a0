import CLibevent
import Glibc
import ProfileCache
import ProfileModel
import ProfileStore
import WireBytes

// The parts of the request path (`RequestProcessor.serve`) that fronts answer through, on the
// worker's thread: the reply scratch and its high-water mark, replies held behind writes in
// flight, writes handed to the writer, and a store failure's reason.

extension RequestProcessor {
    /// Whether a read decoded while the connection's writes are in flight may be answered at
    /// once, its reply held until theirs are written (`holdReply`): only where this worker
    /// reads the store itself, no read of the connection is with the fetchers, the scratch
    /// has `room` for the read's longest reply (so answering it never spills), and less than
    /// the high-water mark is held already. `answerAhead` then checks that none of those writes
    /// touches what the read reads (`writesInFlight(touch:on:)`).
    func mayAnswerAhead(needing room: Int, on connection: Connection) -> Bool {
        reads.readsAtOnce && connection.readsInFlight == 0 && out.remaining >= room
            && connection.heldReplies.byteCount < outputHighWater
    }

    /// Holds the reply `answer` writes into the scratch (which must have room for all of it)
    /// until the writes the connection has taken so far are answered.
    func holdReply(on connection: Connection, _ answer: () -> Void) {
        let start = out.count
        answer()
        connection.heldReplies.hold(UnsafeRawBufferPointer(start: out.base + start, count: out.count - start),
                                    afterWrites: connection.writesTaken)
        out.count = start
    }

    /// Reads a profile the cache missed at once (`WorkerReads.lookUp`), fills the cache with it
    /// (or with its absence) under `ticket`, and hands `use` what was cached (nil: no profile).
    /// The row is encoded for the cache (`CachedProfileEncoding`) at `place(row)`, which must
    /// have room for it.
    /// - Throws: the store's error, or `NeedsFetch.miss` when the fetchers read this store;
    ///   `use` has not run then.
    @usableFromInline package func readMissed<R>(_ userId: UnsafeRawBufferPointer, ticket: FillTicket,
                               encodingAt place: (ProfileRow) -> UnsafeMutableRawPointer,
                               _ use: (EncodedProfile?) -> R) throws -> R {
        do {
            return try reads.lookUp(userId) { row in
                counters.cacheMisses += 1
                guard let row else {
                    cache.fill(userId, profile: nil, ticket: ticket)
                    return use(nil)
                }
                let encoded = context.cacheEncoding.encode(row, at: place(row))
                cache.fill(userId, profile: encoded, ticket: ticket)
                return use(encoded)
            }
        } catch let fetch as NeedsFetch {
            // Counted when the fetchers' answer comes back.
            throw fetch
        } catch {
            // A read that failed missed the cache too.
            counters.cacheMisses += 1
            throw error
        }
    }

    /// The most bytes of a store failure's reason that a front's error reply carries.
    package static let storeFailureReasonBytes = 1024

    /// Why a read of the store failed, for the request's error reply: the store's reason,
    /// which names no file of the server; the log gets the whole error.
    package func storeFailureReason(_ error: any Error) -> String {
        guard let error = error as? StoreError else { return "\(error)" }
        Log.warn("a read of the store failed", ["error": "\(error)"])
        return error.reason
    }

    /// A store failure's reason as an error reply carries it: on one line, and at most
    /// `storeFailureReasonBytes` of it.
    package static func storeFailureText(_ reason: String) -> [UInt8] {
        Array(oneLine(reason).utf8.prefix(storeFailureReasonBytes))
    }

    /// Whether a write in flight on the connection changes `userId` (a FLUSHALL changes every id).
    func writesInFlight(touch userId: UnsafeRawBufferPointer, on connection: Connection) -> Bool {
        for job in connection.unansweredWrites {
            for index in 0..<job.operationCount {
                guard let written = job.userId(at: index) else { return true }
                if bytesEqual(written, userId) { return true }
            }
        }
        return false
    }

    /// Writes out the held replies whose writes are now all answered.
    package func releaseHeldReplies(_ connection: Connection) {
        guard !connection.heldReplies.isEmpty else { return }
        connection.heldReplies.release(answeredWrites: connection.writesAnswered) { bytes in
            reserve(bytes.count, connection)
            if bytes.count <= out.remaining {
                out.append(bytes)
            } else {
                evbuffer_add(connection.output, bytes.baseAddress, bytes.count)
            }
        }
    }

    /// Counts a request answered in this pass, for the latency of its kind.
    @inlinable @inline(__always)
    public func countPass(_ kind: RequestKind) {
        passKindCounts[Int(kind.rawValue)] += 1
        passKindsSeen |= 1 << kind.rawValue
    }

    /// Queues a job for the writer at the end of the pass; its answer comes back to this worker.
    package func submit(_ job: WriteJob, _ connection: Connection) {
        jobs.append(job)
        connection.unansweredWrites.append(job)
        connection.writesTaken += 1
    }

    /// Whether replies must pause: the connection's unsent replies reached its high-water mark
    /// (no more is answered until the client reads), or this pass made its share
    /// (`replyBytesPerPass`: the rest is made on the next loop turn, after the other
    /// connections had theirs, so one client's large replies never hold up the others).
    @inlinable @inline(__always)
    public func repliesMustPause(_ connection: Connection) -> Bool {
        out.count >= replyBytesPerPass || out.count + connection.queuedOutput >= outputHighWater
    }

    // MARK: Replies

    /// Makes room for `count` more reply bytes in the scratch.
    @inlinable @inline(__always)
    public func reserve(_ count: Int, _ connection: Connection) {
        if out.remaining < count { spill(connection) }
    }

    /// Drops what was written of the reply begun at the mark.
    func takeBack(since mark: ReplyMark, on connection: Connection) {
        if connection.queuedOutput == mark.queued {
            out.count = mark.count
        } else {
            // The first spill took the replies before the mark along; what follows them is this one's.
            connection.dropQueuedOutput(after: mark.queued + mark.count)
            out.count = 0
        }
    }
}
