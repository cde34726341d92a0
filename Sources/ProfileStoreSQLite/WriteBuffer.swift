import CPrefetch
import Glibc
import ProfileStore
import ProfileSystem
import Synchronization
import WireBytes

/// Every committed write the table does not have yet: the memtables, oldest first (the last
/// one takes new entries until it is frozen), and an index from each id to its newest entry.
///
/// Reads look here before the table: a write is visible here from its commit until the
/// merge that moves it into the table has committed, so a read that misses here and then
/// reads a snapshot of the table taken since the last drop (`dropEpoch`) sees every
/// committed write. A FLUSHALL is a marker (`clearedAt`) until the merger empties the table:
/// meanwhile the table counts as empty.
///
/// Dropping merged memtables costs nothing per entry: index slots that name a dropped
/// memtable are stale, lookups pass over them, and the write path builds the index afresh
/// without them, outside the lock, once they take too much of it (`prepareIndex`).
///
/// Threading: a monitor; any thread may call any method not marked otherwise. Its lock is its
/// own: every method takes it for as long as it needs and no longer, and the compound reads a
/// SCAN or RECENT make run inside `withContents`. The write path appends (the only thread that
/// changes the index), the merger freezes and drops, readers look up; the lock's condition
/// wakes the merger for work and the write path when room comes back.
final class WriteBuffer: @unchecked Sendable {
    private let lock = ConditionLock()
    /// Oldest first. Serials are consecutive, so an index reference finds its memtable by
    /// subtraction.
    fileprivate private(set) var memtables: [Memtable] = []
    /// Each of `memtables`' chunk table and index slot count, in the same order, where the
    /// index resolves references without touching the memtable objects, which every lookup
    /// would otherwise retain and release.
    private var live: UnsafeMutablePointer<LiveMemtable>
    private var liveCapacity = 16
    /// The serial of the oldest memtable still here (`nextSerial` when there is none): index
    /// slots naming an older one are stale.
    private var firstLiveSerial: UInt32 = 1
    private var nextSerial: UInt32 = 1
    /// Every memtable's chunks are `1 << chunkShift` bytes.
    private let chunkShift: Int
    private var index: EntryIndex
    /// Index slots naming dropped memtables; `staleSlotsAdded` counts them since the start.
    private var staleSlots = 0
    private var staleSlotsAdded = 0
    /// Ids the write path has made room for in the index (`prepareIndex`) and not appended yet.
    private var reservedSlots = 0
    /// The sequence of a FLUSHALL whose emptying of the table has not committed yet.
    fileprivate private(set) var clearedAt: Int64?
    /// Bumped, with the lock held, whenever what the table holds changes in a way a reader of
    /// an older snapshot must not miss: memtables dropped after their merge, the table emptied.
    let dropEpoch = Atomic<Int>(0)
    /// Memory the memtables and the index hold, and how much they may; `bytes` is kept current
    /// in `currentBytes` for threads that read it without the lock.
    private var bytes = 0 {
        didSet { currentBytes.store(bytes, ordering: .relaxed) }
    }
    let currentBytes = Atomic<Int>(0)
    let limitBytes: Int
    /// Whether someone waits for a merge: the buffer past half its limit (writes are about to
    /// be held back), a FLUSHALL to carry out, or a stop. Kept for threads that ask without
    /// the lock (a background merge step, every few thousand SQLite steps).
    private let urgent = Atomic<Bool>(false)
    private var stopRequested = false
    /// Entries in the memtables, superseded ones included: writes the table does not have yet.
    private var entries = 0
    /// A merge starts at once when the buffer holds `1 / mergeStartShare` of its limit
    /// (`wantsMerge`); before, small merges would cost more per row.
    static let mergeStartShare = 32

    init(limitBytes: Int, hasher: KeyHasher = KeyHasher(seed: UInt64.random(in: .min ... .max))) {
        self.limitBytes = limitBytes
        chunkShift = Memtable.chunkShift(forLimit: limitBytes)
        live = .allocate(capacity: liveCapacity)
        index = EntryIndex(hasher: hasher, slots: EntryIndex.initialSlots)
        bytes = index.footprint
    }

    deinit { live.deallocate() }

    /// Any thread, without the lock.
    var isUrgent: Bool { urgent.load(ordering: .relaxed) }

    /// Recomputes `isUrgent` after a change to what it depends on. Lock held.
    private func noteUrgency() {
        urgent.store(stopRequested || clearedAt != nil || 2 * bytes >= limitBytes, ordering: .relaxed)
    }

    // MARK: Looking up

    /// The live memtables as the index sees them.
    private var resolver: EntryResolver {
        EntryResolver(memtables: live, firstSerial: firstLiveSerial, count: UInt32(memtables.count),
                      chunkShift: chunkShift)
    }

    /// What the buffer knows of an id (`lookUp`).
    enum Lookup<R> {
        /// Its newest entry, as the lookup's `found` made it into a result.
        case found(R)
        /// No entry: the table has all there is, or nothing at all while a FLUSHALL waits to
        /// be carried out (`tableCleared`); a snapshot of the table read for it must be at
        /// least as new as `dropEpoch`.
        case notHere(tableCleared: Bool, dropEpoch: Int)
    }

    /// Looks `userId` up: its newest entry is handed to `found` under the lock, and is valid
    /// only there.
    func lookUp<R>(_ userId: UnsafeRawBufferPointer, _ found: (MemtableEntry) throws -> R) rethrows -> Lookup<R> {
        lock.lock()
        defer { lock.unlock() }
        if let entry = newest(userId) { return .found(try found(entry)) }
        return .notHere(tableCleared: clearedAt != nil, dropEpoch: dropEpoch.load(ordering: .acquiring))
    }

    /// Runs `body` with the buffer's contents under the lock, so that nothing is appended,
    /// merged or dropped meanwhile: for a SCAN or RECENT, which merge them with the table.
    func withContents<R>(_ body: (WriteBufferContents) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(WriteBufferContents(buffer: self))
    }

    /// Entries not merged yet (superseded ones included), and the memory the buffer holds.
    var occupancy: (entries: Int, bytes: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (entries, bytes)
    }

    /// Waits until the buffer is below its limit, or `deadline` (`monotonicNanos`) has passed;
    /// returns whether it is.
    func waitForRoom(until deadline: Int) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        while bytes >= limitBytes {
            let now = monotonicNanos()
            guard now < deadline else { return false }
            lock.wait(forNanos: min(deadline - now, 100_000_000))
        }
        return true
    }

    /// The newest entry for `userId`, or nil when the buffer has none. Lock held.
    fileprivate func newest(_ userId: UnsafeRawBufferPointer) -> MemtableEntry? {
        let resolver = self.resolver
        return index.reference(of: userId, hash: index.hash(of: userId), resolver: resolver).map(resolver.entry)
    }

    /// Whether `entry` (at `offset` in `memtable`) is the newest entry of its id. Lock held.
    @inline(__always)
    fileprivate func isNewest(_ entry: MemtableEntry, at offset: UInt32, in memtable: Memtable) -> Bool {
        index.reference(of: entry.userId, hash: index.hash(of: entry.userId), resolver: resolver)
            == EntryIndex.reference(memtable.serial, offset)
    }

    // MARK: Writing

    /// Starts loading the index slots that the lookups of the ids `visit` names read first, so
    /// that a commit's memory misses overlap.
    func prefetchIndexSlots(_ visit: ((UnsafeRawBufferPointer) -> Void) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        visit { index.prefetch(index.hash(of: $0)) }
    }

    /// Appends a committed frame's `count` operations, which `operations` hands to the given
    /// function in order, numbered from `firstSequence`: from now on reads find them. Wakes
    /// the merger when there is work for it. Returns whether a memtable froze (for the
    /// merger's sorter). The write path's thread only (see `prepareIndex`).
    func appendCommitted(count: Int, firstSequence: Int64, now: Int,
                         _ operations: ((WriteLogFile.OperationKind, UnsafeRawBufferPointer, UnsafeRawBufferPointer,
                                         UnsafeRawBufferPointer) -> Void) -> Void) -> Bool {
        prepareIndex(forAdding: count)
        lock.lock()
        var sequence = firstSequence
        var froze = false
        operations { kind, userId, name, portraitUri in
            froze = apply(kind, sequence: sequence, userId: userId, name: name, portraitUri: portraitUri, now: now) || froze
            sequence += 1
        }
        let wakeMerger = froze || clearedAt != nil || wantsMerge
        lock.unlock()
        if wakeMerger { lock.broadcast() }
        return froze
    }

    /// Makes sure the index can take `count` more ids without growing under the lock: when it
    /// would pass three quarters full, or stale slots fill a quarter of it, a new one is built
    /// from the live slots on the calling thread, without the lock, and swapped in under it.
    ///
    /// Only the write path's thread (or whoever opens the store) may call it, with the lock
    /// not held: no other thread changes the index table it reads unlocked. (`drop` may swap
    /// in another table meanwhile, never smaller than `count` needs; the rebuilt one then
    /// replaces it.)
    func prepareIndex(forAdding count: Int) {
        lock.lock()
        reservedSlots = count
        let table = index
        let occupied = table.occupied
        let stale = staleSlots
        let staleMark = staleSlotsAdded
        let firstLive = firstLiveSerial
        let liveMemtables = UInt32(memtables.count)
        lock.unlock()
        guard (occupied + count) * 4 > table.slotCount * 3
                || (4 * stale > table.slotCount && table.slotCount > EntryIndex.initialSlots) else { return }
        var size = EntryIndex.initialSlots
        while size < 2 * (occupied - stale + count) { size *= 2 }
        let rebuilt = table.rebuilt(slots: size) { reference in
            UInt32(truncatingIfNeeded: reference >> 32) &- firstLive < liveMemtables
        }
        lock.lock()
        // The index may have been replaced meanwhile (`drop`): this one takes its place.
        bytes += rebuilt.footprint - index.footprint
        index = rebuilt
        // Memtables dropped while it was built left stale slots in it too.
        staleSlots = staleSlotsAdded - staleMark
        lock.unlock()
    }

    /// Applies one logged operation: an upsert or removal becomes its id's newest entry; a
    /// FLUSHALL forgets everything before it. Returns whether a memtable was frozen to make
    /// room (the merger sorts it for SCAN). Lock held.
    private func apply(_ kind: WriteLogFile.OperationKind, sequence: Int64, userId: UnsafeRawBufferPointer,
               name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer, now: Int) -> Bool {
        switch kind {
        case .put:
            return append(sequence: sequence, kind: .put, userId: userId, name: name, portraitUri: portraitUri, now: now)
        case .removal:
            return append(sequence: sequence, kind: .removal, userId: userId, name: name, portraitUri: portraitUri,
                          now: now)
        case .removeAll:
            clear(at: sequence)
            return false
        }
    }

    /// Applies an operation read back from the log at open; returns whether the buffer is
    /// full now (the caller merges it before reading on).
    func replay(_ record: LogRecord) -> Bool {
        prepareIndex(forAdding: 1)
        lock.lock()
        defer { lock.unlock() }
        _ = apply(record.kind, sequence: record.sequence, userId: record.userId, name: record.name,
                  portraitUri: record.portraitUri, now: monotonicNanos())
        return bytes >= limitBytes
    }

    /// Appends committed writes to the active memtable, starting one when there is none or
    /// it is full, and makes each the newest of its id.
    private func append(sequence: Int64, kind: Memtable.Kind, userId: UnsafeRawBufferPointer,
                        name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer, now: Int) -> Bool {
        let active: Memtable
        var froze = false
        let size = Memtable.entryBytes(idCount: userId.count, nameCount: name.count, portraitUriCount: portraitUri.count)
        if let last = memtables.last, !last.isFrozen, last.hasRoom(forEntryBytes: size) {
            active = last
        } else {
            if let last = memtables.last, !last.isFrozen {
                last.isFrozen = true
                froze = true
            }
            active = Memtable(serial: nextSerial, chunkShift: chunkShift)
            nextSerial &+= 1
            if memtables.isEmpty { firstLiveSerial = active.serial }
            if memtables.count == liveCapacity {
                let grown = UnsafeMutablePointer<LiveMemtable>.allocate(capacity: 2 * liveCapacity)
                grown.moveInitialize(from: live, count: memtables.count)
                live.deallocate()
                live = grown
                liveCapacity *= 2
            }
            (live + memtables.count).initialize(to: LiveMemtable(chunks: active.chunks, indexedSlots: 0))
            memtables.append(active)
            // What a new memtable holds before its first entry (its list of offsets) counts
            // too: `drop` takes back its whole footprint.
            bytes += active.footprint
        }
        let before = active.footprint
        let offset = active.append(sequence: sequence, kind: kind, userId: userId, name: name,
                                   portraitUri: portraitUri, now: now)
        let resolver = self.resolver
        let replaced = index.set(userId, hash: index.hash(of: userId), to: EntryIndex.reference(active.serial, offset),
                                 resolver: resolver)
        if let replaced { live[resolver.position(of: replaced)].indexedSlots -= 1 }
        live[memtables.count - 1].indexedSlots += 1
        if reservedSlots > 0 { reservedSlots -= 1 }
        bytes += active.footprint - before
        entries += 1
        if 2 * bytes >= limitBytes { noteUrgency() }
        return froze
    }

    /// FLUSHALL at `sequence`: forgets every entry; the table counts as empty until the
    /// merger has emptied it (`tableEmptied`). Lock held.
    private func clear(at sequence: Int64) {
        for memtable in memtables { memtable.isFrozen = true }
        live.deinitialize(count: memtables.count)
        memtables.removeAll()
        firstLiveSerial = nextSerial
        // As large as before: the rest of the frame being applied was made room for.
        index = EntryIndex(hasher: index.hasher, slots: index.slotCount)
        staleSlots = 0
        clearedAt = sequence
        bytes = index.footprint
        entries = 0
        dropEpoch.add(1, ordering: .releasing)
        noteUrgency()
    }

    /// The merger emptied the table for the FLUSHALL at `sequence`.
    func tableEmptied(at sequence: Int64) {
        lock.lock()
        defer { lock.unlock() }
        if clearedAt == sequence { clearedAt = nil }
        dropEpoch.add(1, ordering: .releasing)
        noteUrgency()
    }

    // MARK: Merging

    /// What the merger is to do next (`waitForMergeWork`).
    enum MergeWork {
        /// Empty the table for the FLUSHALL at this sequence, then `tableEmptied`.
        case emptyTable(through: Int64)
        /// Merge these memtables, every one of the buffer's, now frozen; then `dropMerged`.
        case merge([Memtable])
        /// A stop was asked and nothing is left to do (or `givingUp`).
        case stop
    }

    /// Waits until there is work for the merger: a FLUSHALL to carry out; enough to merge
    /// (`wantsMerge`), an entry that has waited `maximumWaitNanos`, or anything at all once a
    /// stop is asked; else `.stop` once one is. `givingUp`: merges keep failing, and a stop, once
    /// asked, need not wait for them.
    func waitForMergeWork(givingUp: Bool, maximumWaitNanos: Int) -> MergeWork {
        lock.lock()
        defer { lock.unlock() }
        while true {
            if stopRequested && givingUp { return .stop }
            if let sequence = clearedAt { return .emptyTable(through: sequence) }
            if let oldest = memtables.first?.firstAppendNanos,
               stopRequested || wantsMerge || monotonicNanos() - oldest >= maximumWaitNanos {
                memtables.last?.isFrozen = true
                return .merge(memtables)
            }
            if stopRequested { return .stop }
            lock.wait(forNanos: 100_000_000)
        }
    }

    /// Whether a merge should start without waiting: the buffer is urgent, or holds its share.
    /// Lock held.
    private var wantsMerge: Bool { isUrgent || bytes * Self.mergeStartShare >= limitBytes }

    /// Every memtable, the active one frozen first, for a merge on the calling thread.
    func freezeAll() -> [Memtable] {
        lock.lock()
        defer { lock.unlock() }
        memtables.last?.isFrozen = true
        return memtables
    }

    /// Asks the merger to merge what is left and stop (`waitForMergeWork`); writes meanwhile
    /// are urgent.
    func requestStop() {
        lock.lock()
        stopRequested = true
        noteUrgency()
        lock.unlock()
        lock.broadcast()
    }

    /// The sequence of a FLUSHALL that waits for the table to be emptied, if one does.
    var pendingClear: Int64? {
        lock.lock()
        defer { lock.unlock() }
        return clearedAt
    }

    /// The oldest frozen memtable not yet sorted by id, if any.
    func oldestUnsortedFrozen() -> Memtable? {
        lock.lock()
        defer { lock.unlock() }
        return memtables.first { $0.isFrozen && $0.sortedLatest == nil }
    }

    /// Those of `memtables` not yet sorted by id.
    func unsorted(_ memtables: [Memtable]) -> [Memtable] {
        lock.lock()
        defer { lock.unlock() }
        return memtables.filter { $0.sortedLatest == nil }
    }

    /// Gives `memtable` its entries sorted by id, for SCAN and merges; the first of two
    /// threads sorting the same one wins, and both orders are the same.
    func publish(sortedLatest sorted: [UInt32], of memtable: Memtable) {
        lock.lock()
        defer { lock.unlock() }
        memtable.publish(sortedLatest: sorted)
    }

    /// Removes from `entries` every one that is no longer the newest of its id.
    func keepNewest(_ entries: inout [MemtableEntry]) {
        lock.lock()
        defer { lock.unlock() }
        for entry in entries { index.prefetch(index.hash(of: entry.userId)) }
        entries.removeAll { newest($0.userId)?.base != $0.base }
    }

    /// Forgets memtables whose merge has committed (the oldest ones; any already gone, after
    /// a FLUSHALL, are skipped), tells readers to renew their snapshots of the table, and
    /// wakes writers waiting for room. Their index slots go stale at once; their memory goes
    /// with the last reference to them.
    func dropMerged(_ merged: [Memtable]) {
        lock.lock()
        drop(merged)
        lock.unlock()
        lock.broadcast()
    }

    /// `dropMerged`'s work; lock held.
    private func drop(_ merged: [Memtable]) {
        guard let last = merged.last, let first = memtables.first,
              last.serial &- first.serial < UInt32(memtables.count) else { return }
        let count = Int(last.serial &- first.serial) + 1
        for (position, memtable) in memtables.prefix(count).enumerated() {
            bytes -= memtable.footprint
            entries -= memtable.entryCount
            staleSlots += live[position].indexedSlots
            staleSlotsAdded += live[position].indexedSlots
        }
        live.deinitialize(count: count)
        live.moveInitialize(from: live + count, count: memtables.count - count)
        memtables.removeFirst(count)
        firstLiveSerial = memtables.first?.serial ?? nextSerial
        if memtables.isEmpty { shrinkIndex() }
        dropEpoch.add(1, ordering: .releasing)
        noteUrgency()
    }

    /// With every memtable merged, replaces an index that a burst of writes grew with an empty
    /// one of the size the writes made room for need, so that an idle server does not keep
    /// the burst's index (16 MB after a million writes) until its next write.
    private func shrinkIndex() {
        var size = EntryIndex.initialSlots
        while size < 2 * reservedSlots { size *= 2 }
        guard size < index.slotCount else { return }
        let empty = EntryIndex(hasher: index.hasher, slots: size)
        bytes += empty.footprint - index.footprint
        index = empty
        staleSlots = 0
    }
}

/// The buffer's contents while `WriteBuffer.withContents` holds its lock: valid only in that
/// body, on its thread.
struct WriteBufferContents {
    fileprivate unowned(unsafe) let buffer: WriteBuffer

    /// Oldest first; the last may still take entries, once the lock is let go.
    var memtables: [Memtable] { buffer.memtables }
    /// Whether a FLUSHALL waits to be carried out: the table counts as empty.
    var tableCleared: Bool { buffer.clearedAt != nil }

    /// The newest entry for `userId`, or nil when the buffer has none.
    func newest(_ userId: UnsafeRawBufferPointer) -> MemtableEntry? { buffer.newest(userId) }

    /// Whether `entry` (at `offset` in `memtable`) is the newest entry of its id.
    func isNewest(_ entry: MemtableEntry, at offset: UInt32, in memtable: Memtable) -> Bool {
        buffer.isNewest(entry, at: offset, in: memtable)
    }
}

/// A live memtable as the index sees it: where its chunks are, and how many index slots
/// name one of its entries.
struct LiveMemtable {
    let chunks: UnsafeMutablePointer<UnsafeMutableRawPointer>
    var indexedSlots: Int
}

/// Resolves index references (memtable serial and offset) to entries through the buffer's
/// table of live memtables. A value made under the buffer's lock, and used only while it
/// is held: a drop or a new memtable moves the table.
struct EntryResolver {
    let memtables: UnsafeMutablePointer<LiveMemtable>
    let firstSerial: UInt32
    let count: UInt32
    let chunkShift: Int

    /// Whether the reference names a memtable still in the buffer.
    @inline(__always)
    func isLive(_ reference: UInt64) -> Bool {
        UInt32(truncatingIfNeeded: reference >> 32) &- firstSerial < count
    }

    /// Where a live reference's memtable is in the table.
    @inline(__always)
    func position(of reference: UInt64) -> Int {
        Int(UInt32(truncatingIfNeeded: reference >> 32) &- firstSerial)
    }

    /// The entry a live reference names.
    @inline(__always)
    func entry(_ reference: UInt64) -> MemtableEntry {
        Memtable.entry(at: UInt32(truncatingIfNeeded: reference), chunks: memtables[position(of: reference)].chunks,
                       chunkShift: chunkShift)
    }
}

/// An open-addressing table from id to a reference (memtable serial and offset) to its
/// newest entry; the ids themselves are read from the entries. Each slot holds the id's hash
/// and the reference side by side, so a probe touches one cache line before it reads an
/// entry. Slots whose reference is no longer live are passed over, never read through.
///
/// Threading: the buffer's lock; see `WriteBuffer.prepareIndex` for the one unlocked read.
final class EntryIndex: @unchecked Sendable {
    private struct Slot {
        /// The id's hash with the low bit set, or 0 for an empty slot.
        var hash: UInt64
        var reference: UInt64
    }

    let hasher: KeyHasher
    private let slots: UnsafeMutableBufferPointer<Slot>
    private let mask: Int
    /// Slots in use, stale ones included.
    private(set) var occupied = 0

    static let initialSlots = 1024

    init(hasher: KeyHasher, slots count: Int) {
        self.hasher = hasher
        slots = .allocate(capacity: count)
        slots.initialize(repeating: Slot(hash: 0, reference: 0))
        mask = count - 1
    }

    deinit { slots.deallocate() }

    static func reference(_ serial: UInt32, _ offset: UInt32) -> UInt64 {
        UInt64(serial) << 32 | UInt64(offset)
    }

    var slotCount: Int { slots.count }
    var footprint: Int { slots.count * MemoryLayout<Slot>.stride }

    /// What the index hashes `userId` to; callers that probe more than once pass it along.
    @inline(__always)
    func hash(of userId: UnsafeRawBufferPointer) -> UInt64 { hasher.hash(userId) | 1 }

    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: hash >> 7) & mask }

    /// Starts loading the slot a probe for `hash` begins at.
    @inline(__always)
    func prefetch(_ hash: UInt64) {
        profiled_prefetch(slots.baseAddress! + home(hash))
    }

    /// The slot holding `userId` with a live reference, or nil.
    @inline(__always)
    private func slot(of userId: UnsafeRawBufferPointer, hash: UInt64, resolver: EntryResolver) -> Int? {
        var slot = home(hash)
        while slots[slot].hash != 0 {
            if slots[slot].hash == hash && resolver.isLive(slots[slot].reference)
                && bytesEqual(resolver.entry(slots[slot].reference).userId, userId) {
                return slot
            }
            slot = (slot + 1) & mask
        }
        return nil
    }

    func reference(of userId: UnsafeRawBufferPointer, hash: UInt64, resolver: EntryResolver) -> UInt64? {
        slot(of: userId, hash: hash, resolver: resolver).map { slots[$0].reference }
    }

    /// Makes `reference` the newest for `userId`; returns the live reference it replaced, if
    /// any. The caller has made room (`WriteBuffer.prepareIndex`).
    func set(_ userId: UnsafeRawBufferPointer, hash: UInt64, to reference: UInt64,
             resolver: EntryResolver) -> UInt64? {
        if let slot = slot(of: userId, hash: hash, resolver: resolver) {
            let replaced = slots[slot].reference
            slots[slot].reference = reference
            return replaced
        }
        precondition(occupied < slots.count - 1, "the write buffer's index is full")
        var slot = home(hash)
        while slots[slot].hash != 0 { slot = (slot + 1) & mask }
        slots[slot] = Slot(hash: hash, reference: reference)
        occupied += 1
        return nil
    }

    /// A table of `count` slots holding this one's slots whose references `keep` accepts.
    func rebuilt(slots count: Int, keep: (UInt64) -> Bool) -> EntryIndex {
        let table = EntryIndex(hasher: hasher, slots: count)
        for entry in slots where entry.hash != 0 && keep(entry.reference) {
            var slot = table.home(entry.hash)
            while table.slots[slot].hash != 0 { slot = (slot + 1) & table.mask }
            table.slots[slot] = entry
            table.occupied += 1
        }
        return table
    }
}
