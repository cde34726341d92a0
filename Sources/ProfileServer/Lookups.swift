import ProfileCache
import ProfileModel
import ProfileStore

// Looking up one profile, for every front: the cache while the store's lease vouches for it,
// else the store this worker reads, which fills the cache under the ticket the miss gave;
// a shared store's fetchers when this worker cannot read it. The counters (`cmd_get`,
// `get_hits`, `get_misses`, `cache_hits`, `cache_misses`) are counted here, once.

extension RequestProcessor {
    /// Looks `userId` up for a front that answers with its values: `use` gets them (nil: no
    /// profile). On a cache hit they are views of the cached entry, under its shard's lock, so
    /// `use` must only write into room already reserved; else the store's row, once it filled
    /// the cache. The views are valid only during `use`. An id the cache does not hold that
    /// `mayBeStored` refuses (checked only then, as it may cost more than the lookup) has no
    /// profile, and the store is not asked.
    /// - Throws: `NeedsFetch`, having counted nothing (the fetchers count the lookup); the
    ///   store's error, counted as a lookup that missed. `use` has not run then.
    @inlinable @inline(__always)
    public func withProfile<R>(_ userId: UnsafeRawBufferPointer, mayBeStored: (UnsafeRawBufferPointer) -> Bool,
                               _ use: (ProfileValues?) -> R) throws -> R {
        if !cacheVouched {
            guard mayBeStored(userId) else {
                countRead(found: false)
                return use(nil)
            }
            throw NeedsFetch.leaseExpired
        }
        // The closure touches nothing of the worker: it runs under the shard's lock.
        let found: CacheLookupResult<R> = cache.lookup(userId) { outcome in
            switch outcome {
            case .hit(let profile):
                let (name, portraitUri) = profile.values
                return .hit(use(ProfileValues(name: name, portraitUri: portraitUri)))
            case .absent: return .absent(use(nil))
            case .miss(let ticket): return .miss(ticket)
            }
        }
        switch found {
        case .hit(let answered):
            countCached(hit: true)
            return answered
        case .absent(let answered):
            countCached(hit: false)
            return answered
        case .miss(let ticket):
            guard mayBeStored(userId) else {
                countRead(found: false)
                return use(nil)
            }
            let scratch = valueScratch
            return try readLookedUp(userId, ticket: ticket, encodingAt: { _ in scratch }) { encoded in
                use(encoded.map { ProfileValues(name: $0.name, portraitUri: $0.portraitUri) })
            }
        }
    }

    /// Looks `userId` up for the front whose reply is the cache's own encoding
    /// (`CachedProfileEncoding`): leaves that encoding at the end of the reply scratch, not yet
    /// counted in `out.count`, and returns its length; nil when there is no profile. Without
    /// `copying` (EXISTS: only the outcome) nothing is copied and the length is 0. A cached
    /// encoding that does not fit the scratch's room moves the scratch to the connection's
    /// queue first; one read from the store is written where `place` says, after it reserved
    /// room for it.
    /// - Throws: as `withProfile`.
    @inlinable @inline(__always)
    public func lookUpEncoding(_ userId: UnsafeRawBufferPointer, copying: Bool, on connection: Connection,
                               place: (ProfileRow) -> UnsafeMutableRawPointer) throws -> Int? {
        if !cacheVouched { throw NeedsFetch.leaseExpired }
        var outcome: CacheCopy
        while true {
            let room = copying ? out.remaining : 0
            outcome = cache.lookup(userId, copyingReplyInto: UnsafeMutableRawBufferPointer(start: out.end, count: room))
            guard case .hit(let replyCount) = outcome, copying, replyCount > room else { break }
            // It did not fit: move the scratch to the connection's queue and look again.
            precondition(out.count > 0, "a cached reply longer than the whole reply scratch")
            spill(connection)
        }
        switch outcome {
        case .hit(let replyCount):
            countCached(hit: true)
            return copying ? replyCount : 0
        case .absent:
            countCached(hit: false)
            return nil
        case .miss(let ticket):
            return try readLookedUp(userId, ticket: ticket, encodingAt: place) { encoded in
                encoded.map { copying ? $0.reply.count : 0 }
            }
        }
    }

    /// `readMissed` for a lookup the cache missed, counted as one: what the store found, or,
    /// when it failed, a lookup that missed. A `NeedsFetch` counts nothing.
    @inlinable @inline(__always)
    func readLookedUp<R>(_ userId: UnsafeRawBufferPointer, ticket: FillTicket,
                         encodingAt place: (ProfileRow) -> UnsafeMutableRawPointer,
                         _ use: (EncodedProfile?) -> R) throws -> R {
        do {
            return try readMissed(userId, ticket: ticket, encodingAt: place) { encoded in
                countRead(found: encoded != nil)
                return use(encoded)
            }
        } catch let fetch as NeedsFetch {
            throw fetch
        } catch {
            counters.getLookups += 1
            throw error
        }
    }

    /// Counts a lookup the cache answered.
    @inlinable @inline(__always)
    func countCached(hit: Bool) {
        counters.getLookups += 1
        counters.cacheHits += 1
        if hit { counters.getHits += 1 } else { counters.getMisses += 1 }
    }

    /// Counts a lookup the store answered (`readMissed` counted its cache miss), or that no
    /// profile could answer.
    @inlinable @inline(__always)
    func countRead(found: Bool) {
        counters.getLookups += 1
        if found { counters.getHits += 1 } else { counters.getMisses += 1 }
    }
}

/// What a cache lookup found, with what `withProfile`'s caller made of it.
@usableFromInline
enum CacheLookupResult<R> {
    case hit(R)
    case absent(R)
    case miss(FillTicket)
}
