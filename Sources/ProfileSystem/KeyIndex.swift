import Glibc

/// An open-addressing index from byte-string keys to the numbers a caller gives them (indices
/// into its own arrays), for the ids of one group commit. It keeps each key's number and hash,
/// not its bytes: `find` asks the caller for the bytes of a number to compare.
///
/// Finding and setting are two calls, so that the bytes may live beside the index in the same
/// value: `find` only reads, and `set` takes no closure.
///
/// A value type; one thread.
public struct KeyIndex {
    @usableFromInline var numbers: [Int32] = []
    @usableFromInline var hashes: [UInt64] = []
    @usableFromInline var mask = 0
    @usableFromInline let hasher: KeyHasher

    /// With a seed of its own, so that clients cannot aim their ids at one slot.
    public init() {
        hasher = KeyHasher(seed: UInt64.random(in: .min ... .max))
    }

    /// Where a key is, or would go.
    public struct Position {
        /// The key's number; nil when the index does not hold the key.
        public let number: Int?
        @usableFromInline let slot: Int
        @usableFromInline let hash: UInt64

        @inlinable init(number: Int?, slot: Int, hash: UInt64) {
            self.number = number
            self.slot = slot
            self.hash = hash
        }
    }

    /// Empties the index, with room for `count` keys.
    public mutating func reset(forKeys count: Int) {
        var size = 16
        while size < 2 * count { size *= 2 }
        if numbers.count == size {
            removeAll()
        } else {
            numbers = Array(repeating: -1, count: size)
            hashes = Array(repeating: 0, count: size)
        }
        mask = size - 1
    }

    /// Forgets every key, keeping the room.
    public mutating func removeAll() {
        for slot in numbers.indices { numbers[slot] = -1 }
    }

    /// Finds `key`; `keyOf(n)` gives the bytes of the key numbered `n`.
    @inlinable
    public func find(_ key: UnsafeRawBufferPointer, keyOf: (Int) -> UnsafeRawBufferPointer) -> Position {
        let hash = hasher.hash(key)
        var slot = Int(truncatingIfNeeded: hash) & mask
        while numbers[slot] >= 0 {
            let number = Int(numbers[slot])
            if hashes[slot] == hash && Self.same(keyOf(number), key) {
                return Position(number: number, slot: slot, hash: hash)
            }
            slot = (slot + 1) & mask
        }
        return Position(number: nil, slot: slot, hash: hash)
    }

    /// Numbers the key `find` returned `position` for: a new key, or a new number for one held.
    /// No other key may have been set since that `find`.
    @inlinable
    public mutating func set(_ position: Position, to number: Int) {
        numbers[position.slot] = Int32(number)
        hashes[position.slot] = position.hash
    }

    @inlinable
    static func same(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        a.count == b.count && (a.isEmpty || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0)
    }
}
