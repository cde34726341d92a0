import Glibc

/// Blocks taken out of a shard under its lock and freed once the lock is released,
/// so the critical section never waits on the allocator.
///
/// The blocks are chained through their own first bytes. Owned by the thread that
/// made the change; freeing happens when the value goes away.
struct DroppedBlocks: ~Copyable {
    private var head: UnsafeMutableRawPointer?

    init() {}

    deinit {
        var next = head
        while let block = next {
            next = block.load(as: UnsafeMutableRawPointer?.self)
            free(block)
        }
    }

    /// Takes ownership of `block`; its contents must not be read afterwards.
    mutating func append(_ block: EntryBlock) {
        block.base.storeBytes(of: head, as: UnsafeMutableRawPointer?.self)
        head = block.base
    }
}
