import Glibc

/// The one block that holds everything an entry owns.
///
/// Layout: a 4-byte header (reply length: UInt16, id length: UInt8, kind and eviction state:
/// UInt8), then
/// - for a profile: the reply (always at offset 4, so a hit finds it without reading further),
///   then where its id, name and portraitUri are (offsets from the block's start and lengths:
///   id offset, name offset and length, portraitUri offset and length; one byte each when all
///   fit, as they do for most profiles, else two, `wideBit`), and then whichever of the three
///   raw values the reply does not carry byte for byte (one that had to be escaped), so that a
///   reply that writes them as they are costs nothing more;
/// - for a remembered absence: its two links in the absence list, then the raw id.
///
/// The cache knows nothing of how a reply is encoded: it keeps the bytes it is given, and
/// finds the fields wherever the caller's views point.
///
/// A plain pointer wrapper; whoever holds the shard's lock may read and write it.
struct EntryBlock {
    enum Kind: UInt8 {
        case absence
        case profile
    }

    /// The kind byte's low bits hold the kind; above them, what eviction needs (`ShardState`):
    /// whether the entry is in the main queue, and how often it was looked up (up to 3) since it
    /// came in or eviction last passed it.
    static let kindMask: UInt8 = 0x03
    /// A profile whose offsets and lengths take two bytes each.
    static let wideBit: UInt8 = 0x04
    static let mainBit: UInt8 = 0x20
    /// The top two bits: the byte is below `frequencyMask` exactly while the count can grow.
    static let frequencyShift: UInt8 = 6
    static let frequencyMask: UInt8 = 0xC0
    static let maxFrequency = 3

    /// `CachedProfile.reply`, inlined into the fronts, finds the reply right after it.
    static let headerSize = 4
    /// The id's offset, and the name's and the portraitUri's offsets and lengths, after a
    /// profile's reply.
    static let locationCount = 5
    static let absenceLinksSize = 8
    static let maxReplyLength = Int(UInt16.max)
    static let maxKeyLength = Int(UInt8.max)

    let base: UnsafeMutableRawPointer

    init(_ base: UnsafeMutableRawPointer) {
        self.base = base
    }

    /// Where a profile's block puts its reply and values: the reply at `headerSize`, then the
    /// values' locations, each value inside the reply when the reply carries it byte for byte,
    /// else after the locations.
    private struct ProfileLayout {
        var byteCount: Int
        var wide: Bool
        /// The id's offset, the name's offset and length, the portraitUri's offset and length.
        var locations: (Int, Int, Int, Int, Int)
        var afterReply: Int
        init?(key: UnsafeRawBufferPointer, profile: EncodedProfile) {
            let reply = profile.reply
            guard (1...maxKeyLength).contains(key.count), reply.count <= maxReplyLength else { return nil }
            var keyInReply = EntryBlock.offset(of: key, in: reply)
            if keyInReply == nil, let copy = profile.userIdInReply, copy.count == key.count,
               EntryBlock.bytesEqual(copy.baseAddress!, key.baseAddress!, count: key.count) {
                keyInReply = EntryBlock.offset(of: copy, in: reply)
            }
            let nameInReply = EntryBlock.offset(of: profile.name, in: reply)
            let portraitUriInReply = EntryBlock.offset(of: profile.portraitUri, in: reply)
            // One byte a location when every one fits in it, else two.
            for wide in [false, true] {
                afterReply = headerSize + reply.count
                var end = afterReply + locationCount * (wide ? 2 : 1)
                func place(_ value: UnsafeRawBufferPointer, verbatimAt offsetInReply: Int?) -> Int {
                    if let offsetInReply { return headerSize + offsetInReply }
                    defer { end += value.count }
                    return end
                }
                let keyOffset = place(key, verbatimAt: keyInReply)
                let nameOffset = place(profile.name, verbatimAt: nameInReply)
                let portraitUriOffset = place(profile.portraitUri, verbatimAt: portraitUriInReply)
                locations = (keyOffset, nameOffset, profile.name.count, portraitUriOffset, profile.portraitUri.count)
                let largest = max(keyOffset, nameOffset, profile.name.count, portraitUriOffset, profile.portraitUri.count)
                if !wide && largest > Int(UInt8.max) { continue }
                // Offsets are UInt16 at most: a block must end within 64 KiB.
                guard end <= Int(UInt16.max) else { return nil }
                byteCount = end
                self.wide = wide
                return
            }
            return nil
        }
    }

    /// Where `value` starts in `reply`, when it is a view of bytes inside it; an empty value
    /// is anywhere.
    private static func offset(of value: UnsafeRawBufferPointer, in reply: UnsafeRawBufferPointer) -> Int? {
        guard value.count > 0 else { return 0 }
        guard let start = value.baseAddress, let replyStart = reply.baseAddress,
              start >= replyStart, start + value.count <= replyStart + reply.count else { return nil }
        return start - replyStart
    }

    /// Copies `profile` for `key` into a new block from `slab`, or returns nil when the sizes
    /// do not fit its header.
    static func makeProfile(key: UnsafeRawBufferPointer, profile: EncodedProfile, in slab: inout BlockSlab) -> EntryBlock? {
        guard let layout = ProfileLayout(key: key, profile: profile) else { return nil }
        let block = allocate(kind: .profile, replyLength: profile.reply.count, keyLength: key.count,
                             byteCount: layout.byteCount, in: &slab)
        if layout.wide { block.base.storeBytes(of: Kind.profile.rawValue | wideBit, toByteOffset: 3, as: UInt8.self) }
        block.write(key: key, profile: profile, layout)
        return block
    }

    /// Writes `profile` for `key` over this profile's block when the new contents take a chunk
    /// of the same size, as most rewrites of a profile do; returns false, changing nothing,
    /// when they would not (a new block is needed then).
    func overwrite(key: UnsafeRawBufferPointer, profile: EncodedProfile) -> Bool {
        guard !isAbsence, key.count == keyLength, let layout = ProfileLayout(key: key, profile: profile) else { return false }
        let chunk = BlockSlab.chunkSize(for: layout.byteCount)
        guard chunk > 0, chunk == BlockSlab.chunkSize(for: byteCount) else { return false }
        // Where it stands in eviction's queues stays.
        let evictionState = base.load(fromByteOffset: 3, as: UInt8.self) & (Self.mainBit | Self.frequencyMask)
        base.storeBytes(of: UInt16(profile.reply.count), as: UInt16.self)
        base.storeBytes(of: Kind.profile.rawValue | evictionState | (layout.wide ? Self.wideBit : 0), toByteOffset: 3, as: UInt8.self)
        write(key: key, profile: profile, layout)
        return true
    }

    /// Writes the reply, the locations and the values the reply does not carry.
    private func write(key: UnsafeRawBufferPointer, profile: EncodedProfile, _ layout: ProfileLayout) {
        let reply = profile.reply
        if reply.count > 0 { (base + Self.headerSize).copyMemory(from: reply.baseAddress!, byteCount: reply.count) }
        let (keyOffset, nameOffset, nameCount, portraitUriOffset, portraitUriCount) = layout.locations
        func store(_ index: Int, _ value: Int) {
            if layout.wide {
                base.storeBytes(of: UInt16(value), toByteOffset: layout.afterReply + 2 * index, as: UInt16.self)
            } else {
                base.storeBytes(of: UInt8(value), toByteOffset: layout.afterReply + index, as: UInt8.self)
            }
        }
        store(0, keyOffset)
        store(1, nameOffset)
        store(2, nameCount)
        store(3, portraitUriOffset)
        store(4, portraitUriCount)
        let valuesStart = layout.afterReply + Self.locationCount * (layout.wide ? 2 : 1)
        func copyIfAfterReply(_ value: UnsafeRawBufferPointer, to offset: Int) {
            guard offset >= valuesStart, value.count > 0 else { return }
            (base + offset).copyMemory(from: value.baseAddress!, byteCount: value.count)
        }
        copyIfAfterReply(key, to: keyOffset)
        copyIfAfterReply(profile.name, to: nameOffset)
        copyIfAfterReply(profile.portraitUri, to: portraitUriOffset)
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

    /// Lookups since the entry came in or eviction last passed it, counted up to `maxFrequency`.
    var frequency: Int {
        get { Int((base.load(fromByteOffset: 3, as: UInt8.self) & Self.frequencyMask) >> Self.frequencyShift) }
        nonmutating set {
            let byte = base.load(fromByteOffset: 3, as: UInt8.self) & ~Self.frequencyMask
            base.storeBytes(of: byte | UInt8(newValue) << Self.frequencyShift, toByteOffset: 3, as: UInt8.self)
        }
    }

    /// A lookup: one more use, unless the count is at its top already (then nothing is written).
    @inline(__always)
    func countUse() {
        let byte = base.load(fromByteOffset: 3, as: UInt8.self)
        if byte < Self.frequencyMask {
            base.storeBytes(of: byte &+ 1 << Self.frequencyShift, toByteOffset: 3, as: UInt8.self)
        }
    }

    /// In the main queue, rather than the small one new entries start in.
    var isInMain: Bool {
        get { base.load(fromByteOffset: 3, as: UInt8.self) & Self.mainBit != 0 }
        nonmutating set {
            let byte = base.load(fromByteOffset: 3, as: UInt8.self)
            base.storeBytes(of: newValue ? byte | Self.mainBit : byte & ~Self.mainBit, toByteOffset: 3, as: UInt8.self)
        }
    }

    /// A profile's reply; only meaningful when not `isAbsence`.
    var reply: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Self.headerSize, count: replyLength)
    }

    /// A profile's reply and values; only meaningful when not `isAbsence`.
    var profile: CachedProfile { CachedProfile(block: base) }

    /// A profile's name and portraitUri; only meaningful when not `isAbsence`.
    var values: (name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        // Where the locations are, and their width, read once for the four.
        let (locations, wide) = (self.locations, isWide)
        func location(_ index: Int) -> Int { Self.location(index, at: locations, wide: wide) }
        return (UnsafeRawBufferPointer(start: base + location(1), count: location(2)),
                UnsafeRawBufferPointer(start: base + location(3), count: location(4)))
    }

    private var isWide: Bool { base.load(fromByteOffset: 3, as: UInt8.self) & Self.wideBit != 0 }

    /// Where a profile's locations start: right after its reply.
    private var locations: UnsafeMutableRawPointer { base + Self.headerSize + replyLength }

    /// A profile's location number `index` (`ProfileLayout.locations`).
    private func location(_ index: Int) -> Int { Self.location(index, at: locations, wide: isWide) }

    private static func location(_ index: Int, at locations: UnsafeMutableRawPointer, wide: Bool) -> Int {
        wide ? Int(locations.loadUnaligned(fromByteOffset: 2 * index, as: UInt16.self))
             : Int(locations.load(fromByteOffset: index, as: UInt8.self))
    }

    /// The value whose offset and length are locations `index` and `index + 1`.
    private func field(at index: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + location(index), count: location(index + 1))
    }

    var key: UnsafeRawBufferPointer {
        let offset = isAbsence ? Self.headerSize + Self.absenceLinksSize : location(0)
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

    /// The bytes the block was made with, from its header: a profile's ends with its reply or
    /// with the last value copied after it.
    var byteCount: Int {
        if isAbsence { return Self.headerSize + Self.absenceLinksSize + keyLength }
        let name = field(at: 1), portraitUri = field(at: 3)
        let keyEnd = location(0) + keyLength
        return max(Self.headerSize + replyLength + Self.locationCount * (isWide ? 2 : 1), keyEnd,
                   name.baseAddress! - UnsafeRawPointer(base) + name.count,
                   portraitUri.baseAddress! - UnsafeRawPointer(base) + portraitUri.count)
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
