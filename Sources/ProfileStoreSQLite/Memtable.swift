import Glibc
import ProfileStore

/// One batch of committed writes kept in memory until a merge moves them into the table: the
/// entries in commit order, in chunks that never move, so a view of an entry stays valid for
/// as long as the memtable lives.
///
/// An entry: sequence (Int64), kind (UInt8), id length (UInt8), name length (UInt16),
/// portraitUri length (UInt16), two bytes of padding, then the three values; each entry starts
/// at a multiple of eight. A removal has empty values.
///
/// Threading: appended to only by the write path's thread, and only while it is the
/// buffer's active memtable, with the buffer's lock held; once frozen it never changes and
/// any thread may read it. Reads of an active memtable hold the buffer's lock.
final class Memtable: @unchecked Sendable {
    /// Chunks are `1 << chunkShift` bytes: small beside the buffer's limit, so that one
    /// memtable's first chunk does not take a small buffer's room, and large enough for any entry.
    let chunkShift: Int
    var chunkBytes: Int { 1 << chunkShift }
    static func chunkShift(forLimit limit: Int) -> Int {
        var shift = 14
        while shift < 20 && (1 << (shift + 1)) * 64 <= limit { shift += 1 }
        return shift
    }
    /// Entries past which the write path starts a new memtable: a SCAN filters the active
    /// one entry by entry, so this bounds its cost (a fraction of a millisecond).
    static let maxEntries = 1 << 14
    /// Chunks past which the write path starts a new memtable: the chunk table has a fixed
    /// size, so that its address never changes and the buffer can resolve entries through it.
    static let maxChunks = 64
    static let headerBytes = 16

    enum Kind: UInt8 {
        case put = 1
        case removal = 2
    }

    /// Consecutive across the memtables of a buffer; the index's references carry it.
    let serial: UInt32
    /// The chunks in order: `chunkCount` of a table of `maxChunks`, allocated once.
    let chunks: UnsafeMutablePointer<UnsafeMutableRawPointer>
    private(set) var chunkCount = 0
    /// Bytes used in the last chunk.
    private var used: Int
    /// Where each entry starts, in commit order (`chunk << chunkShift | offset`).
    private(set) var offsets: [UInt32] = []
    private(set) var firstSequence: Int64 = 0
    private(set) var lastSequence: Int64 = 0
    /// When its first entry was appended, for merging writes that wait too long.
    private(set) var firstAppendNanos = 0
    /// Set once no more entries may come; then `sortedLatest` may be built.
    var isFrozen = false

    init(serial: UInt32, chunkShift: Int) {
        self.serial = serial
        self.chunkShift = chunkShift
        used = 1 << chunkShift
        chunks = .allocate(capacity: Self.maxChunks)
        offsets.reserveCapacity(1024)
    }

    deinit {
        for i in 0..<chunkCount { munmap(chunks[i], chunkBytes) }
        chunks.deallocate()
    }

    var entryCount: Int { offsets.count }

    /// Memory it holds: its chunks and its list of offsets.
    var footprint: Int { chunkCount * chunkBytes + offsets.capacity * MemoryLayout<UInt32>.stride }

    /// Whether an entry of `size` bytes (`entryBytes`) may be appended.
    func hasRoom(forEntryBytes size: Int) -> Bool {
        offsets.count < Self.maxEntries && (used + size <= chunkBytes || chunkCount < Self.maxChunks)
    }

    static func entryBytes(idCount: Int, nameCount: Int, portraitUriCount: Int) -> Int {
        (headerBytes + idCount + nameCount + portraitUriCount + 7) & ~7
    }

    /// Appends an entry and returns where it starts.
    /// - Precondition: `hasRoom(forEntryBytes:)` for its size.
    func append(sequence: Int64, kind: Kind, userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                portraitUri: UnsafeRawBufferPointer, now: Int) -> UInt32 {
        precondition(!isFrozen, "an entry appended to a frozen memtable")
        let size = Self.entryBytes(idCount: userId.count, nameCount: name.count, portraitUriCount: portraitUri.count)
        if used + size > chunkBytes {
            // Mapped, not malloc'd: a merged memtable's memory goes back to the system at once,
            // where the allocator would keep it for the process. Populated at once: one call
            // instead of a page fault for every page the entries reach.
            guard let chunk = mmap(nil, chunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                                   -1, 0),
                  chunk != MAP_FAILED else { fatalError("out of memory for the write buffer") }
            precondition(chunkCount < Self.maxChunks, "an entry appended to a full memtable")
            chunks[chunkCount] = chunk
            chunkCount += 1
            used = 0
        }
        let offset = UInt32(truncatingIfNeeded: (chunkCount - 1) << chunkShift | used)
        let entry = chunks[chunkCount - 1] + used
        entry.storeBytes(of: sequence, as: Int64.self)
        entry.storeBytes(of: kind.rawValue, toByteOffset: 8, as: UInt8.self)
        entry.storeBytes(of: UInt8(userId.count), toByteOffset: 9, as: UInt8.self)
        entry.storeBytes(of: UInt16(name.count), toByteOffset: 10, as: UInt16.self)
        entry.storeBytes(of: UInt16(portraitUri.count), toByteOffset: 12, as: UInt16.self)
        var at = Self.headerBytes
        // Each value by itself: an array of the three would be built for every entry.
        if userId.count > 0 { (entry + at).copyMemory(from: userId.baseAddress!, byteCount: userId.count) }
        at += userId.count
        if name.count > 0 { (entry + at).copyMemory(from: name.baseAddress!, byteCount: name.count) }
        at += name.count
        if portraitUri.count > 0 { (entry + at).copyMemory(from: portraitUri.baseAddress!, byteCount: portraitUri.count) }
        used += size
        if offsets.isEmpty {
            firstSequence = sequence
            firstAppendNanos = now
        }
        lastSequence = sequence
        offsets.append(offset)
        return offset
    }

    @inline(__always)
    func entry(at offset: UInt32) -> MemtableEntry {
        Self.entry(at: offset, chunks: chunks, chunkShift: chunkShift)
    }

    /// The entry at `offset` of a memtable with these chunks.
    @inline(__always)
    static func entry(at offset: UInt32, chunks: UnsafeMutablePointer<UnsafeMutableRawPointer>,
                      chunkShift: Int) -> MemtableEntry {
        MemtableEntry(chunks[Int(offset >> UInt32(chunkShift))] + Int(offset & (UInt32(1) << chunkShift &- 1)))
    }

    /// The offsets of the newest entry of each id, sorted by id: what a merge writes, and
    /// where a SCAN looks. Built once the memtable is frozen, by whoever needs it first.
    private(set) var sortedLatest: [UInt32]?

    /// Sorts the entries by id, keeping the newest of each id. The memtable must be frozen:
    /// it reads entries without the buffer's lock.
    func makeSortedLatest() -> [UInt32] {
        precondition(isFrozen, "sorting a memtable that still takes entries")
        // Sorted by eight bytes of the ids, then the whole id, then age: most comparisons are
        // of two integers, with no trip to the entries. The eight bytes start after what every
        // id shares ("user:000..."), which would otherwise make every comparison a tie.
        var shared = Int.max
        if let first = offsets.first {
            let reference = entry(at: first).userId
            for offset in offsets where shared > 0 {
                shared = commonPrefixCount(reference, entry(at: offset).userId, atMost: shared)
            }
        }
        var keys = offsets.map { offset in (prefix: idPrefix(entry(at: offset).userId, from: shared), offset: offset) }
        keys.sort { a, b in
            if a.prefix != b.prefix { return a.prefix < b.prefix }
            let left = entry(at: a.offset), right = entry(at: b.offset)
            let byId = compareIds(left.userId, right.userId)
            return byId != 0 ? byId < 0 : left.sequence < right.sequence
        }
        var latest: [UInt32] = []
        latest.reserveCapacity(keys.count)
        for (i, key) in keys.enumerated() {
            if i + 1 < keys.count && keys[i + 1].prefix == key.prefix
                && compareIds(entry(at: key.offset).userId, entry(at: keys[i + 1].offset).userId) == 0 {
                continue
            }
            latest.append(key.offset)
        }
        return latest
    }

    /// Keeps a sorted view built by `makeSortedLatest`; with the buffer's lock held.
    func publish(sortedLatest: [UInt32]) {
        if self.sortedLatest == nil { self.sortedLatest = sortedLatest }
    }
}

/// A view of one memtable entry, valid while its memtable lives (and, for the active one,
/// while the buffer's lock is held).
struct MemtableEntry {
    let base: UnsafeMutableRawPointer

    init(_ base: UnsafeMutableRawPointer) { self.base = base }

    var sequence: Int64 { base.load(as: Int64.self) }
    var kind: Memtable.Kind { Memtable.Kind(rawValue: base.load(fromByteOffset: 8, as: UInt8.self))! }
    var isRemoval: Bool { base.load(fromByteOffset: 8, as: UInt8.self) == Memtable.Kind.removal.rawValue }
    private var idCount: Int { Int(base.load(fromByteOffset: 9, as: UInt8.self)) }
    private var nameCount: Int { Int(base.load(fromByteOffset: 10, as: UInt16.self)) }
    private var portraitUriCount: Int { Int(base.load(fromByteOffset: 12, as: UInt16.self)) }

    var userId: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Memtable.headerBytes, count: idCount)
    }

    var name: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Memtable.headerBytes + idCount, count: nameCount)
    }

    var portraitUri: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Memtable.headerBytes + idCount + nameCount, count: portraitUriCount)
    }

    /// The profile it writes, or nil for a removal.
    var row: ProfileRow? {
        isRemoval ? nil : ProfileRow(userId: userId, name: name, portraitUri: portraitUri)
    }
}

/// Eight bytes of an id from `start` on as a big-endian integer, zero-padded: two ids that
/// share their first `start` bytes compare as these integers do when those differ (ids hold
/// no NUL, so padding sorts a shorter id first).
@inline(__always)
func idPrefix(_ id: UnsafeRawBufferPointer, from start: Int = 0) -> UInt64 {
    var prefix: UInt64 = 0
    let end = id.count
    for i in start..<start + 8 { prefix = prefix << 8 | UInt64(i < end ? id[i] : 0) }
    return prefix
}

/// How many leading bytes two ids share, counting no further than `limit`.
@inline(__always)
func commonPrefixCount(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, atMost limit: Int) -> Int {
    let end = min(a.count, b.count, limit)
    var count = 0
    while count < end && a[count] == b[count] { count += 1 }
    return count
}

/// Byte order of two ids, shorter first on a common prefix (SQLite's BINARY collation).
@inline(__always)
func compareIds(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int32 {
    let common = min(a.count, b.count)
    let order = common == 0 ? 0 : memcmp(a.baseAddress!, b.baseAddress!, common)
    if order != 0 { return order }
    return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
}
