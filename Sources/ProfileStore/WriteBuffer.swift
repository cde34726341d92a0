import Glibc
import ProfileSystem
import Synchronization

/// Every committed write the table does not have yet: the memtables, oldest first (the last
/// one takes new entries until it is frozen), and an index from each id to its newest entry.
///
/// Reads look here before the table: a write is visible here from its commit until the
/// merge that moves it into the table has committed, so a read that misses here and then
/// reads a snapshot of the table taken since the last drop (`dropEpoch`) sees every
/// committed write. A FLUSHALL is a marker (`clearedAt`) until the merger empties the table:
/// meanwhile the table counts as empty.
///
/// Threading: thread-safe through `lock`, which every method below needs held unless it says
/// otherwise. The write path appends, the merger freezes and drops, readers read; `lock`'s
/// condition wakes the merger for work and the write path when room comes back.
final class WriteBuffer: @unchecked Sendable {
    let lock = ConditionLock()
    /// Oldest first. Serials are consecutive, so an index reference finds its memtable by
    /// subtraction.
    private(set) var memtables: [Memtable] = []
    private var nextSerial: UInt32 = 1
    private var index: EntryIndex
    /// The sequence of a FLUSHALL whose emptying of the table has not committed yet.
    private(set) var clearedAt: Int64?
    /// Bumped, with the lock held, whenever what the table holds changes in a way a reader of
    /// an older snapshot must not miss: memtables dropped after their merge, the table emptied.
    let dropEpoch = Atomic<Int>(0)
    /// Memory the memtables and the index hold, and how much they may; `bytes` is kept current
    /// in `currentBytes` for threads that read it without the lock.
    private(set) var bytes = 0 {
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
    private(set) var entries = 0

    init(limitBytes: Int, hasher: KeyHasher = KeyHasher(seed: UInt64.random(in: .min ... .max))) {
        self.limitBytes = limitBytes
        index = EntryIndex(hasher: hasher)
        bytes = index.footprint
    }

    /// Any thread, without the lock.
    var isUrgent: Bool { urgent.load(ordering: .relaxed) }

    /// Recomputes `isUrgent` after a change to what it depends on; `stopping` once a stop is asked.
    func noteUrgency(stopping: Bool = false) {
        if stopping { stopRequested = true }
        urgent.store(stopRequested || clearedAt != nil || 2 * bytes >= limitBytes, ordering: .relaxed)
    }

    // MARK: Looking up

    /// The newest entry for `userId`, or nil when the buffer has none.
    func newest(_ userId: UnsafeRawBufferPointer) -> MemtableEntry? {
        index.find(userId, resolve: resolve)
    }

    /// The entry a reference names.
    @inline(__always)
    private func resolve(_ reference: UInt64) -> MemtableEntry {
        let serial = UInt32(truncatingIfNeeded: reference >> 32)
        let memtable = memtables[Int(serial &- memtables[0].serial)]
        return memtable.entry(at: UInt32(truncatingIfNeeded: reference))
    }

    /// Whether `entry` (at `offset` in `memtable`) is the newest entry of its id.
    @inline(__always)
    func isNewest(_ entry: MemtableEntry, at offset: UInt32, in memtable: Memtable) -> Bool {
        index.reference(of: entry.userId, resolve: resolve) == EntryIndex.reference(memtable.serial, offset)
    }

    // MARK: Writing

    /// Applies one logged operation: an upsert or removal becomes its id's newest entry; a
    /// FLUSHALL forgets everything before it. Returns whether a memtable was frozen to make
    /// room (the merger sorts it for SCAN).
    @discardableResult
    func apply(_ kind: WriteLogFile.OperationKind, sequence: Int64, userId: UnsafeRawBufferPointer,
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

    /// Applies an operation read back from the log at open.
    func apply(_ record: LogRecord) {
        _ = apply(record.kind, sequence: record.sequence, userId: record.userId, name: record.name,
              portraitUri: record.portraitUri, now: monotonicNanos())
    }

    /// Appends committed writes to the active memtable, starting one when there is none or
    /// it is full, and makes each the newest of its id.
    private func append(sequence: Int64, kind: Memtable.Kind, userId: UnsafeRawBufferPointer,
                        name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer, now: Int) -> Bool {
        let active: Memtable
        var froze = false
        if let last = memtables.last, !last.isFrozen, last.entryCount < Memtable.maxEntries {
            active = last
        } else {
            if let last = memtables.last, !last.isFrozen {
                last.isFrozen = true
                froze = true
            }
            active = Memtable(serial: nextSerial, chunkShift: Memtable.chunkShift(forLimit: limitBytes))
            nextSerial &+= 1
            memtables.append(active)
        }
        let before = active.footprint
        let offset = active.append(sequence: sequence, kind: kind, userId: userId, name: name,
                                   portraitUri: portraitUri, now: now)
        let indexBefore = index.footprint
        index.set(userId, to: EntryIndex.reference(active.serial, offset), resolve: resolve)
        bytes += active.footprint - before + index.footprint - indexBefore
        entries += 1
        if 2 * bytes >= limitBytes { noteUrgency() }
        return froze
    }

    /// FLUSHALL at `sequence`: forgets every entry; the table counts as empty until the
    /// merger has emptied it (`tableEmptied`).
    func clear(at sequence: Int64) {
        for memtable in memtables { memtable.isFrozen = true }
        memtables.removeAll()
        index.removeAll()
        clearedAt = sequence
        bytes = index.footprint
        entries = 0
        dropEpoch.add(1, ordering: .releasing)
        noteUrgency()
    }

    /// The merger emptied the table for the FLUSHALL at `sequence`.
    func tableEmptied(at sequence: Int64) {
        if clearedAt == sequence { clearedAt = nil }
        dropEpoch.add(1, ordering: .releasing)
        noteUrgency()
    }

    // MARK: Merging

    /// The oldest frozen memtable not yet sorted by id, if any.
    var unsortedFrozen: Memtable? { memtables.first { $0.isFrozen && $0.sortedLatest == nil } }

    /// Freezes the active memtable and returns every memtable, for a merge.
    func freezeAll() -> [Memtable] {
        memtables.last?.isFrozen = true
        return memtables
    }

    /// Forgets memtables whose merge has committed (the oldest ones; any already gone, after
    /// a FLUSHALL, are skipped). Readers renew their snapshots of the table at once; the index
    /// lets go of the entries a few thousand at a time, releasing the lock in between, so that
    /// no read or commit waits for all of a large merge's entries (an entry found meanwhile
    /// holds just what the table now has). Lock held on entry and on return.
    func drop(_ merged: [Memtable]) {
        guard let last = merged.last, let first = memtables.first,
              last.serial &- first.serial < UInt32(memtables.count) else { return }
        let dropping = Array(memtables.prefix(Int(last.serial &- first.serial) + 1))
        dropEpoch.add(1, ordering: .releasing)
        for memtable in dropping {
            let offsets = memtable.offsets
            var done = 0
            while done < offsets.count {
                // A FLUSHALL meanwhile forgot these memtables and the whole index.
                guard memtables.first === dropping[0] else { return }
                let end = min(done + Self.removalsPerLockHold, offsets.count)
                for offset in offsets[done..<end] {
                    index.remove(memtable.entry(at: offset).userId,
                                 ifReferencing: EntryIndex.reference(memtable.serial, offset), resolve: resolve)
                }
                done = end
                lock.unlock()
                lock.lock()
            }
        }
        guard memtables.first === dropping[0] else { return }
        let indexBefore = index.footprint
        for memtable in dropping {
            bytes -= memtable.footprint
            entries -= memtable.entryCount
        }
        memtables.removeFirst(dropping.count)
        index.shrinkIfSparse()
        bytes += index.footprint - indexBefore
        noteUrgency()
    }

    /// Index entries `drop` removes before it lets others have the lock.
    static let removalsPerLockHold = 4096

    /// When the oldest entry still waiting was committed, or nil when none waits.
    var oldestAppendNanos: Int? { memtables.first.map(\.firstAppendNanos) }
}

/// An open-addressing table from id to a reference (memtable serial and offset) to its
/// newest entry; the ids themselves are read from the entries.
///
/// Threading: the buffer's lock.
struct EntryIndex {
    private let hasher: KeyHasher
    /// Per slot: the id's hash with the low bit set, or 0 for an empty slot.
    private var hashes: [UInt64]
    private var references: [UInt64]
    private var count = 0
    private var mask: Int

    static let initialSlots = 1024

    init(hasher: KeyHasher) {
        self.hasher = hasher
        hashes = [UInt64](repeating: 0, count: Self.initialSlots)
        references = [UInt64](repeating: 0, count: Self.initialSlots)
        mask = Self.initialSlots - 1
    }

    static func reference(_ serial: UInt32, _ offset: UInt32) -> UInt64 {
        UInt64(serial) << 32 | UInt64(offset)
    }

    var footprint: Int { hashes.capacity * 16 }

    @inline(__always)
    private func slotHash(_ userId: UnsafeRawBufferPointer) -> UInt64 { hasher.hash(userId) | 1 }

    /// The slot holding `userId`, or nil.
    @inline(__always)
    private func slot(of userId: UnsafeRawBufferPointer, hash: UInt64,
                      resolve: (UInt64) -> MemtableEntry) -> Int? {
        var slot = Int(truncatingIfNeeded: hash >> 7) & mask
        while hashes[slot] != 0 {
            if hashes[slot] == hash && sameBytes(resolve(references[slot]).userId, userId) { return slot }
            slot = (slot + 1) & mask
        }
        return nil
    }

    func find(_ userId: UnsafeRawBufferPointer, resolve: (UInt64) -> MemtableEntry) -> MemtableEntry? {
        guard count > 0, let slot = slot(of: userId, hash: slotHash(userId), resolve: resolve) else { return nil }
        return resolve(references[slot])
    }

    func reference(of userId: UnsafeRawBufferPointer, resolve: (UInt64) -> MemtableEntry) -> UInt64? {
        guard count > 0, let slot = slot(of: userId, hash: slotHash(userId), resolve: resolve) else { return nil }
        return references[slot]
    }

    mutating func set(_ userId: UnsafeRawBufferPointer, to reference: UInt64, resolve: (UInt64) -> MemtableEntry) {
        let hash = slotHash(userId)
        if let slot = slot(of: userId, hash: hash, resolve: resolve) {
            references[slot] = reference
            return
        }
        if (count + 1) * 4 > hashes.count * 3 { grow(to: hashes.count * 2) }
        var slot = Int(truncatingIfNeeded: hash >> 7) & mask
        while hashes[slot] != 0 { slot = (slot + 1) & mask }
        hashes[slot] = hash
        references[slot] = reference
        count += 1
    }

    /// Removes `userId` if its newest entry is still `reference` (a newer one stays).
    mutating func remove(_ userId: UnsafeRawBufferPointer, ifReferencing reference: UInt64,
                         resolve: (UInt64) -> MemtableEntry) {
        guard let found = slot(of: userId, hash: slotHash(userId), resolve: resolve),
              references[found] == reference else { return }
        // Backward-shift deletion: later slots of the same run move up so no probe breaks.
        var hole = found
        var next = (hole + 1) & mask
        while hashes[next] != 0 {
            let home = Int(truncatingIfNeeded: hashes[next] >> 7) & mask
            // Move it when its home is not between the hole (exclusive) and it (inclusive).
            if (next - home) & mask >= (next - hole) & mask {
                hashes[hole] = hashes[next]
                references[hole] = references[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        hashes[hole] = 0
        references[hole] = 0
        count -= 1
    }

    mutating func removeAll() {
        self = EntryIndex(hasher: hasher)
    }

    /// After a merge drops most entries: a table left an eighth full is built smaller again.
    mutating func shrinkIfSparse() {
        var slots = hashes.count
        while slots > Self.initialSlots && count * 8 < slots { slots /= 2 }
        if slots < hashes.count { grow(to: slots) }
    }

    private mutating func grow(to slots: Int) {
        let oldHashes = hashes, oldReferences = references
        hashes = [UInt64](repeating: 0, count: slots)
        references = [UInt64](repeating: 0, count: slots)
        mask = slots - 1
        for i in oldHashes.indices where oldHashes[i] != 0 {
            var slot = Int(truncatingIfNeeded: oldHashes[i] >> 7) & mask
            while hashes[slot] != 0 { slot = (slot + 1) & mask }
            hashes[slot] = oldHashes[i]
            references[slot] = oldReferences[i]
        }
    }
}
