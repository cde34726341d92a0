/// A profile to cache: its reply as the server sends it, encoded once, and its raw values.
/// A value that the reply carries byte for byte should be a view into `reply`: then it costs
/// the cache nothing more; any other value is copied after the reply.
///
/// Views valid for the call that receives it; the thread that made it uses it.
public struct EncodedProfile {
    public var reply: UnsafeRawBufferPointer
    /// Where the reply carries the id byte for byte, if it does (the key itself is usually the
    /// request's bytes, elsewhere).
    public var userIdInReply: UnsafeRawBufferPointer?
    public var name: UnsafeRawBufferPointer
    public var portraitUri: UnsafeRawBufferPointer

    public init(reply: UnsafeRawBufferPointer, userIdInReply: UnsafeRawBufferPointer? = nil,
                name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        self.reply = reply
        self.userIdInReply = userIdInReply
        self.name = name
        self.portraitUri = portraitUri
    }
}

/// A cached profile: its reply and its raw values, each found in the entry's block only when
/// asked for (a line-protocol hit asks only for the reply).
///
/// Views into the cache, valid only inside the body of `ProfileCache.lookup` that received it.
public struct CachedProfile {
    /// The entry's block (`EntryBlock`).
    @usableFromInline let block: UnsafeMutableRawPointer

    init(block: UnsafeMutableRawPointer) {
        self.block = block
    }

    /// The reply, right after the block's 4-byte header, whose first two bytes are its length.
    @inlinable public var reply: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: block + 4, count: Int(block.load(as: UInt16.self)))
    }

    public var userId: UnsafeRawBufferPointer { EntryBlock(block).key }
    /// The name and the portraitUri, their locations read once.
    public var values: (name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) { EntryBlock(block).values }
}

/// What a lookup found.
///
/// Handed to the body of `ProfileCache.lookup` on the calling thread, while the
/// shard is locked; a hit's bytes are valid only inside that body.
public enum CacheLookup {
    /// The cached profile.
    case hit(CachedProfile)
    /// The id is known to have no profile.
    case absent
    /// Not cached: read the store, then offer the row to `ProfileCache.fill` with this ticket.
    case miss(FillTicket)
}

/// What `ProfileCache.lookup(_:copyingReplyInto:)` found.
///
/// A plain value; any thread may use it.
public enum CacheCopy: Sendable {
    /// The cached reply line is `replyCount` bytes; it was copied if it fitted in the room given.
    case hit(replyCount: Int)
    /// The id is known to have no profile.
    case absent
    /// Not cached: read the store, then offer the row to `ProfileCache.fill` with this ticket.
    case miss(FillTicket)
}

/// Proof of when a miss happened: the shard and its epoch at that moment.
///
/// Opaque to callers; any thread may carry it to `ProfileCache.fill`.
public struct FillTicket: Sendable {
    let shard: UInt32
    let epoch: UInt64
}

/// A snapshot of the cache for STATS, summed over shards (each shard read under its lock).
///
/// A value type; any thread may use it.
public struct CacheStatistics: Sendable, Equatable {
    /// Cached entries, remembered absences included.
    public var items = 0
    /// Of `items`, how many remember that an id has no profile.
    public var absentItems = 0
    /// Bytes held: every entry's block plus the shards' tables and record arrays.
    public var bytes = 0
    /// Entries removed to make room (not those replaced or flushed).
    public var evictions = 0
    /// Bytes of the entries in the small queues, where new entries start (`ShardState`).
    public var smallBytes = 0
    /// Entries moved from a small queue to a main one, for a use while there.
    public var promotions = 0
    /// Fills of ids lately evicted unused from a small queue (the ghost remembered them),
    /// admitted straight to the main queue.
    public var ghostHits = 0
    /// The budget `bytes` stays within.
    public var limitBytes = 0
}

/// One id of a batch for `ProfileCache.prefetch`, with what its stages learn on the way.
///
/// Holds a pointer into the caller's bytes: used by the one thread that filled the batch.
public struct PrefetchSlot {
    /// The id's bytes; only read during `prefetch`.
    public var key: UnsafeRawBufferPointer
    var hash: UInt64 = 0
    var entry: UInt32 = .noEntry

    public init(key: UnsafeRawBufferPointer) {
        self.key = key
    }
}
