import Glibc

/// The ids lately evicted from a shard's small queue without a second use, as S3-FIFO's ghost
/// queue remembers them (`ShardState`): a 32-bit fingerprint of each, in a direct-mapped table
/// where a newer id may overwrite an older one, instead of a queue (no links, 4 bytes an id).
/// An id filled again while it is remembered was wanted again soon after it left: it goes
/// straight to the main queue.
///
/// Made on first use, when it fits the shard's budget; until then it remembers nothing.
/// Owned by one shard; used only under its lock.
struct GhostTable: ~Copyable {
    private var slots: UnsafeMutablePointer<UInt32>?
    private let mask: Int
    /// Its memory in the allocator, counted in the shard's bytes once it is made.
    private(set) var footprint = 0

    /// Room for about one id per 256 bytes of `budget` (a shard holds one entry per 150 to 200):
    /// a power of two from 16 to 2^22.
    init(budget: Int) {
        mask = Self.slotCount(forBudget: budget) - 1
    }

    static func slotCount(forBudget budget: Int) -> Int {
        var count = 16
        while count < budget / 256 && count < 1 << 22 { count <<= 1 }
        return count
    }

    deinit {
        free(slots)
    }

    var isMade: Bool { slots != nil }

    /// What the table will take once made.
    var footprintWhenMade: Int { MallocFootprint.estimate(byteCount: (mask + 1) * MemoryLayout<UInt32>.size) }

    mutating func make() {
        guard let memory = calloc(mask + 1, MemoryLayout<UInt32>.size) else { fatalError("out of memory making a ghost table") }
        slots = memory.bindMemory(to: UInt32.self, capacity: mask + 1)
        footprint = MallocFootprint.of(memory)
    }

    /// The slot is picked by the hash's upper half (the shard's table uses the lower); the
    /// fingerprint is the lower half, never 0 (an empty slot).
    private func slot(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: hash >> 32) & mask }
    private static func fingerprint(_ hash: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: hash) | 1 }

    func remember(hash: UInt64) {
        slots?[slot(hash)] = Self.fingerprint(hash)
    }

    /// Whether the id was remembered; it is forgotten either way.
    func takeBack(hash: UInt64) -> Bool {
        guard let slots else { return false }
        let index = slot(hash)
        guard slots[index] == Self.fingerprint(hash) else { return false }
        slots[index] = 0
        return true
    }
}
