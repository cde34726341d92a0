import ProfileCache
import ProfileProtocol

// Looking ahead over a read's pipelined lookups, so the cache's memory misses
// for all of them overlap (see `ProfileCache.prefetch`). A hint only: requests are served as if
// it never ran.

extension Worker {
    /// How many ids one look-ahead gathers, and how many lines it reads at most: two pipelines
    /// of 16 GETs, or two MGETs of 16.
    static let lookaheadSlots = 32

    /// Prefetches the cache entries of the ids the first complete lines of `bytes` look up
    /// (`RequestDecoder.idsAhead`), when there are two or more.
    func prefetchLookups(_ bytes: UnsafeRawPointer, _ count: Int) {
        var gathered = 0
        let slots = lookahead
        RequestDecoder.idsAhead(bytes, count: count, limit: Self.lookaheadSlots) { userId in
            slots[gathered] = PrefetchSlot(key: userId)
            gathered += 1
        }
        if gathered >= 2 {
            cache.prefetch(UnsafeMutableBufferPointer(rebasing: slots[0..<gathered]))
        }
    }
}
