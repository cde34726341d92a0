import Glibc

/// The one malloc'd block that holds everything an entry owns.
///
/// Layout: a 4-byte header (reply length: UInt16, id length: UInt8, kind and pin: UInt8), then
/// - for a profile: the reply line, followed by the raw id only when the reply does
///   not already carry those bytes right after `VALUE ` (that is, when the id was quoted);
/// - for a remembered absence: its two links in the absence list, then the raw id.
///
/// A plain pointer wrapper; whoever holds the shard's lock may read and write it.
struct EntryBlock {
    enum Kind: UInt8 {
        case absence
        case profileWithIdInReply
        case profileWithIdAfterReply
    }

    /// The kind byte's low bits hold the kind, and its top bit marks an entry looked up since
    /// eviction last passed it.
    static let kindMask: UInt8 = 0x03
    static let referencedBit: UInt8 = 0x80

    static let headerSize = 4
    /// Where a bare id starts in a reply line: after `VALUE `.
    static let idOffsetInReply = 6
    static let absenceLinksSize = 8
    static let maxReplyLength = Int(UInt16.max)
    static let maxKeyLength = Int(UInt8.max)

    let base: UnsafeMutableRawPointer

    init(_ base: UnsafeMutableRawPointer) {
        self.base = base
    }

    /// Copies `key` and `reply` into a new block from `slab`, or returns nil when the sizes do
    /// not fit its header.
    static func makeProfile(key: UnsafeRawBufferPointer, reply: UnsafeRawBufferPointer,
                            in slab: inout BlockSlab) -> EntryBlock? {
        guard (1...maxKeyLength).contains(key.count), reply.count <= maxReplyLength else { return nil }
        let idEnd = idOffsetInReply + key.count
        let idIsInReply = reply.count >= idEnd
            && memcmp(reply.baseAddress! + idOffsetInReply, key.baseAddress!, key.count) == 0
        let kind: Kind = idIsInReply ? .profileWithIdInReply : .profileWithIdAfterReply
        let block = allocate(kind: kind, replyLength: reply.count, keyLength: key.count,
                             byteCount: headerSize + reply.count + (idIsInReply ? 0 : key.count), in: &slab)
        if reply.count > 0 {
            (block.base + headerSize).copyMemory(from: reply.baseAddress!, byteCount: reply.count)
        }
        if !idIsInReply {
            (block.base + headerSize + reply.count).copyMemory(from: key.baseAddress!, byteCount: key.count)
        }
        return block
    }

    /// Writes `reply` for `key` over this profile's block when the new contents take a chunk of
    /// the same size, as most rewrites of a profile do; returns false, changing nothing, when
    /// they would not (a new block is needed then).
    func overwrite(key: UnsafeRawBufferPointer, reply: UnsafeRawBufferPointer) -> Bool {
        guard !isAbsence, reply.count <= Self.maxReplyLength, key.count == keyLength else { return false }
        let idEnd = Self.idOffsetInReply + key.count
        let idIsInReply = reply.count >= idEnd
            && memcmp(reply.baseAddress! + Self.idOffsetInReply, key.baseAddress!, key.count) == 0
        let newCount = Self.headerSize + reply.count + (idIsInReply ? 0 : key.count)
        let chunk = BlockSlab.chunkSize(for: newCount)
        guard chunk > 0, chunk == BlockSlab.chunkSize(for: byteCount) else { return false }
        let referenced = isReferenced
        base.storeBytes(of: UInt16(reply.count), as: UInt16.self)
        let kind: Kind = idIsInReply ? .profileWithIdInReply : .profileWithIdAfterReply
        base.storeBytes(of: kind.rawValue | (referenced ? Self.referencedBit : 0), toByteOffset: 3, as: UInt8.self)
        if reply.count > 0 { (base + Self.headerSize).copyMemory(from: reply.baseAddress!, byteCount: reply.count) }
        if !idIsInReply { (base + Self.headerSize + reply.count).copyMemory(from: key.baseAddress!, byteCount: key.count) }
        return true
    }

    /// A block from `slab` remembering that `key` has no profile, or nil when the key's size
    /// does not fit.
    static func makeAbsence(key: UnsafeRawBufferPointer, in slab: inout BlockSlab) -> EntryBlock? {
        guard (1...maxKeyLength).contains(key.count) else { return nil }
        let block = allocate(kind: .absence, replyLength: 0, keyLength: key.count,
                             byteCount: headerSize + absenceLinksSize + key.count, in: &slab)
        (block.base + headerSize + absenceLinksSize).copyMemory(from: key.baseAddress!, byteCount: key.count)
        return block
    }

    private static func allocate(kind: Kind, replyLength: Int, keyLength: Int, byteCount: Int,
                                 in slab: inout BlockSlab) -> EntryBlock {
        let base = slab.allocate(byteCount)
        base.storeBytes(of: UInt16(replyLength), as: UInt16.self)
        base.storeBytes(of: UInt8(keyLength), toByteOffset: 2, as: UInt8.self)
        base.storeBytes(of: kind.rawValue, toByteOffset: 3, as: UInt8.self)
        return EntryBlock(base)
    }

    var replyLength: Int { Int(base.load(as: UInt16.self)) }
    var keyLength: Int { Int(base.load(fromByteOffset: 2, as: UInt8.self)) }
    var kind: Kind { Kind(rawValue: base.load(fromByteOffset: 3, as: UInt8.self) & Self.kindMask)! }
    var isAbsence: Bool { base.load(fromByteOffset: 3, as: UInt8.self) & Self.kindMask == Kind.absence.rawValue }

    /// Set by a lookup, cleared when eviction gives the entry its second chance.
    var isReferenced: Bool {
        get { base.load(fromByteOffset: 3, as: UInt8.self) & Self.referencedBit != 0 }
        nonmutating set {
            let byte = base.load(fromByteOffset: 3, as: UInt8.self)
            base.storeBytes(of: newValue ? byte | Self.referencedBit : byte & ~Self.referencedBit,
                            toByteOffset: 3, as: UInt8.self)
        }
    }

    var reply: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Self.headerSize, count: replyLength)
    }

    var key: UnsafeRawBufferPointer {
        let offset: Int
        switch kind {
        case .absence: offset = Self.headerSize + Self.absenceLinksSize
        case .profileWithIdInReply: offset = Self.headerSize + Self.idOffsetInReply
        case .profileWithIdAfterReply: offset = Self.headerSize + replyLength
        }
        return UnsafeRawBufferPointer(start: base + offset, count: keyLength)
    }

    func hasKey(_ other: UnsafeRawBufferPointer) -> Bool {
        keyLength == other.count && Self.bytesEqual(key.baseAddress!, other.baseAddress!, count: other.count)
    }

    /// Compares short byte strings a word at a time: for ids this beats a call to memcmp.
    static func bytesEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count: Int) -> Bool {
        if count >= 8 {
            var offset = 0
            while offset < count - 8 {
                if a.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    != b.loadUnaligned(fromByteOffset: offset, as: UInt64.self) {
                    return false
                }
                offset += 8
            }
            // The last word may overlap the one before; bytes compared twice compare the same.
            return a.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
                == b.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
        }
        if count >= 4 {
            return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
                && a.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
                == b.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        }
        for offset in 0..<count
        where a.load(fromByteOffset: offset, as: UInt8.self) != b.load(fromByteOffset: offset, as: UInt8.self) {
            return false
        }
        return true
    }

    /// The bytes the block was made with, from its header.
    var byteCount: Int {
        switch kind {
        case .absence: Self.headerSize + Self.absenceLinksSize + keyLength
        case .profileWithIdInReply: Self.headerSize + replyLength
        case .profileWithIdAfterReply: Self.headerSize + replyLength + keyLength
        }
    }

    /// Bytes this block really occupies: its slab chunk, or its malloc'd size.
    var footprint: Int {
        let chunk = BlockSlab.chunkSize(for: byteCount)
        return chunk > 0 ? chunk : MallocFootprint.of(base)
    }

    // The absence list's links; only meaningful when `isAbsence`.
    var absencePrevious: UInt32 {
        get { base.load(fromByteOffset: Self.headerSize, as: UInt32.self) }
        nonmutating set { base.storeBytes(of: newValue, toByteOffset: Self.headerSize, as: UInt32.self) }
    }

    var absenceNext: UInt32 {
        get { base.load(fromByteOffset: Self.headerSize + 4, as: UInt32.self) }
        nonmutating set { base.storeBytes(of: newValue, toByteOffset: Self.headerSize + 4, as: UInt32.self) }
    }

    /// Gives the block back to the slab it came from.
    func release(to slab: inout BlockSlab) {
        slab.release(base, byteCount: byteCount)
    }
}
