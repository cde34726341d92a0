/// A wyhash-style 64-bit hash of a short byte string.
///
/// Each table keyed by client-chosen ids draws its own seed, so clients cannot aim all their
/// ids at one bucket. A value type: any thread may use a copy.
public struct KeyHasher: Sendable {
    @usableFromInline
    let seed: UInt64

    // Computed, not stored: a stored static would cost a lazy-initialization check per use.
    @inlinable
    static var primes: (UInt64, UInt64) { (0xa076_1d64_78bd_642f, 0xe703_7ed1_a0b4_28db) }

    public init(seed: UInt64) {
        self.seed = seed ^ Self.fold(seed ^ Self.primes.0, Self.primes.1)
    }

    /// Multiplies to 128 bits and folds the halves: the whole mixing step.
    @inlinable
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    @inlinable @inline(__always)
    public func hash(_ key: UnsafeRawBufferPointer) -> UInt64 {
        let count = key.count
        guard let bytes = key.baseAddress, count > 0 else {
            return Self.fold(seed ^ Self.primes.0, Self.primes.1)
        }
        var state = seed
        var a: UInt64
        var b: UInt64
        if count <= 16 {
            if count >= 4 {
                // Four overlapping 4-byte reads cover every length from 4 to 16.
                let last = count - 4
                let quarter = (count >> 3) << 2
                a = UInt64(Self.load32(bytes, 0)) << 32 | UInt64(Self.load32(bytes, quarter))
                b = UInt64(Self.load32(bytes, last)) << 32 | UInt64(Self.load32(bytes, last - quarter))
            } else {
                let first = UInt64(bytes.load(as: UInt8.self))
                let middle = UInt64(bytes.load(fromByteOffset: count >> 1, as: UInt8.self))
                let final = UInt64(bytes.load(fromByteOffset: count - 1, as: UInt8.self))
                a = first << 16 | middle << 8 | final
                b = 0
            }
        } else {
            var offset = 0
            while count - offset > 16 {
                state = Self.fold(Self.load64(bytes, offset) ^ Self.primes.1,
                                  Self.load64(bytes, offset + 8) ^ state)
                offset += 16
            }
            a = Self.load64(bytes, count - 16)
            b = Self.load64(bytes, count - 8)
        }
        a ^= Self.primes.1
        b ^= state
        let product = a.multipliedFullWidth(by: b)
        return Self.fold(product.low ^ Self.primes.0 ^ UInt64(count), product.high ^ Self.primes.1)
    }

    @inlinable
    static func load32(_ bytes: UnsafeRawPointer, _ offset: Int) -> UInt32 {
        bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
    }

    @inlinable
    static func load64(_ bytes: UnsafeRawPointer, _ offset: Int) -> UInt64 {
        bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
    }
}
