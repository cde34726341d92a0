/// A connection's received bytes not yet handled (a partial request, or requests left while
/// paused): at most `limit`, allocated as needed and grown toward it, freed once empty, so an
/// idle connection holds none. The one owner of its memory.
///
/// Threading: the worker thread that owns the connection.
struct PendingInput: ~Copyable {
    /// The most unhandled bytes the front ever needs to hold to answer: a line protocol line
    /// (`--max-line`), or RESP's largest request with its framing.
    let limit: Int
    private(set) var base: UnsafeMutableRawPointer? = nil
    private(set) var count = 0
    /// Bytes allocated: what the connection holds, whatever `count` is.
    private(set) var capacity = 0

    init(limit: Int) {
        self.limit = limit
    }

    deinit { base?.deallocate() }

    var isEmpty: Bool { count == 0 }

    /// Keeps `count` more bytes after those already kept.
    mutating func keep(_ bytes: UnsafeRawPointer, count added: Int) {
        precondition(count + added <= limit, "more unhandled input than the front may hold")
        reserve(count + added)
        (base! + count).copyMemory(from: bytes, byteCount: added)
        count += added
    }

    /// Room for more input after what is kept: at least 64 KiB, or what is left below `limit`
    /// when that is less (empty once the limit is reached). Bytes received into it are kept
    /// by `received`.
    mutating func room() -> UnsafeMutableRawBufferPointer {
        let wanted = min(limit, count + 65536)
        reserve(wanted)
        return UnsafeMutableRawBufferPointer(start: base! + count, count: max(0, wanted - count))
    }

    /// Keeps the `added` bytes just received into `room()`.
    mutating func received(_ added: Int) {
        precondition(count + added <= capacity, "received more than the room given")
        count += added
    }

    /// Drops the first `dropped` bytes; frees the memory once empty.
    mutating func consume(_ dropped: Int) {
        guard dropped > 0 else { return }
        count -= dropped
        if count == 0 {
            release()
        } else {
            base!.copyMemory(from: base! + dropped, byteCount: count)
        }
    }

    /// Frees the memory and forgets what was kept.
    mutating func release() {
        base?.deallocate()
        base = nil
        count = 0
        capacity = 0
    }

    /// Grows the memory to hold `wanted` bytes, doubling, up to `limit`.
    private mutating func reserve(_ wanted: Int) {
        guard wanted > capacity || base == nil else { return }
        let grownCapacity = min(limit, max(wanted, max(65536, 2 * capacity)))
        let grown = UnsafeMutableRawPointer.allocate(byteCount: max(grownCapacity, 1), alignment: 16)
        if let base {
            grown.copyMemory(from: base, byteCount: count)
            base.deallocate()
        }
        base = grown
        capacity = grownCapacity
    }
}
