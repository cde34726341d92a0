import ProfileProtocol

/// The protocol a target speaks, and the shape a profile takes in it.
public enum TargetProtocol: String, Sendable, CaseIterable {
    /// profiled's line protocol.
    case profiled
    /// memcached's text protocol; a profile is one value.
    case memcached
    /// RESP with Redis's string commands; a profile is one value.
    case redis
    /// RESP with Redis's hash commands; a profile is a hash with the fields `name` and
    /// `portraitUri`, as profiled's RESP front maps it (and as any Redis stores it).
    case resp

    public var defaultPort: UInt16 {
        switch self {
        case .profiled: 7711
        case .memcached: 11211
        case .redis, .resp: 6379
        }
    }

    func parse(_ bytes: UnsafeRawBufferPointer, expecting: ExpectedReply) -> ParseResult {
        switch self {
        case .profiled: ProfiledReplyParser.parse(bytes, expecting: expecting)
        case .memcached: MemcachedReplyParser.parse(bytes, expecting: expecting)
        case .redis: RESPReplyParser.parse(bytes, expecting: expecting)
        case .resp: RESPHashReplyParser.parse(bytes, expecting: expecting)
        }
    }

    /// Operations it has a natural request for.
    func supports(_ operation: Operation) -> Bool {
        switch self {
        case .profiled: operation != .hmget
        case .memcached: !operation.isOperators && operation != .update && operation != .exists && operation != .hmget
        case .redis: !operation.isOperators && operation != .update && operation != .hmget
        case .resp: !operation.isOperators && operation != .mget
        }
    }
}

/// The ids and values a load uses: existing ids `u00000000`, `u00000001`, ... (eight digits
/// or more), missing ids the same with an `x`; every profile gets the same name and portrait
/// URI, `valueSize` bytes together, and memcached and Redis's strings get one value of that size.
///
/// A value type; any thread may use it.
public struct KeySpace: Sendable {
    public let keys: Int
    public let digits: Int
    public let name: [UInt8]
    public let portraitUri: [UInt8]
    /// name and portraitUri together: the value stored in memcached and in Redis's strings.
    public let value: [UInt8]

    public init(keys: Int, valueSize: Int) {
        self.keys = keys
        var digits = 1
        var rest = max(keys - 1, 0) / 10
        while rest > 0 { digits += 1; rest /= 10 }
        self.digits = max(8, digits)
        let nameCount = min(256, max(1, valueSize / 5))
        let uriCount = valueSize - nameCount
        name = Array(Array("Name-abcdefghijklmnopqrstuvwxyz".utf8).cycled(to: nameCount))
        portraitUri = Array(Array("https://cdn.example/p/abcdefghijklmnopqrstuvwxyz0123456789.png/".utf8).cycled(to: uriCount))
        value = name + portraitUri
    }

    public var idLength: Int { 1 + digits }

    /// The text of an id, for people and tests.
    public func id(_ index: Int, missing: Bool = false) -> String {
        let buffer = ByteBuffer(capacity: 32)
        write(index, missing: missing, to: buffer)
        return String(decoding: buffer.readable, as: UTF8.self)
    }

    @inline(__always)
    func write(_ index: Int, missing: Bool, to buffer: ByteBuffer) {
        let out = buffer.reserve(1 + digits)
        out.storeBytes(of: missing ? UInt8(ascii: "x") : UInt8(ascii: "u"), as: UInt8.self)
        var value = index
        for i in stride(from: digits, through: 1, by: -1) {
            out.storeBytes(of: UInt8(0x30 + value % 10), toByteOffset: i, as: UInt8.self)
            value /= 10
        }
        buffer.commit(1 + digits)
    }
}

extension Array where Element == UInt8 {
    /// This pattern repeated or cut to exactly `count` bytes.
    func cycled(to count: Int) -> [UInt8] {
        (0..<count).map { self[$0 % self.count] }
    }
}

/// Writes requests of one protocol straight into a connection's output bytes.
///
/// A value type; each load thread has its own.
struct RequestWriter {
    let target: TargetProtocol
    let space: KeySpace
    let token: [UInt8]?

    /// Profiles per preload request: as many as fit in a profiled request line (at most
    /// 1,000); memcached has no multi-set and HSET writes one hash, so one request each.
    var preloadBatch: Int {
        switch target {
        case .memcached, .resp: 1
        case .profiled, .redis: min(1000, max(1, 60_000 / (space.idLength + space.value.count + 3)))
        }
    }

    /// Ids per warming read: as many as fit in a profiled request line (at most 1,000); no
    /// command reads several hashes, so one HGETALL each.
    var warmBatch: Int { target == .resp ? 1 : min(1000, max(1, 60_000 / (space.idLength + 1))) }

    @inline(__always)
    func key(_ index: Int, _ missing: Bool, _ out: ByteBuffer) {
        space.write(index, missing: missing, to: out)
    }

    /// RESP's `$<length>\r\n` for an id.
    @inline(__always)
    private func respKey(_ index: Int, _ missing: Bool, _ out: ByteBuffer) {
        out.append(byte: UInt8(ascii: "$"))
        out.append(decimal: space.idLength)
        out.append("\r\n")
        key(index, missing, out)
        out.append("\r\n")
    }

    /// RESP's bulk string of `bytes`.
    private func respBulk(_ bytes: [UInt8], _ out: ByteBuffer) {
        out.append(byte: UInt8(ascii: "$"))
        out.append(decimal: bytes.count)
        out.append("\r\n")
        out.append(bytes)
        out.append("\r\n")
    }

    func lookup(_ index: Int, missing: Bool, to out: ByteBuffer) {
        switch target {
        case .profiled: out.append("GET "); key(index, missing, out); out.append(byte: 0x0A)
        case .memcached: out.append("get "); key(index, missing, out); out.append("\r\n")
        case .redis: out.append("*2\r\n$3\r\nGET\r\n"); respKey(index, missing, out)
        case .resp: out.append("*2\r\n$7\r\nHGETALL\r\n"); respKey(index, missing, out)
        }
    }

    /// Resp only: both fields of one profile, by name.
    func lookupFields(_ index: Int, missing: Bool, to out: ByteBuffer) {
        out.append("*4\r\n$5\r\nHMGET\r\n"); respKey(index, missing, out)
        out.append("$4\r\nname\r\n$11\r\nportraitUri\r\n")
    }

    /// Reads profiles `range` once, in one request (resp: `range` holds one id).
    func warmingRead(_ range: Range<Int>, to out: ByteBuffer) {
        if target == .resp {
            lookup(range.lowerBound, missing: false, to: out)
            return
        }
        beginMultiLookup(count: range.count, to: out)
        for index in range { multiLookupKey(index, missing: false, to: out) }
        endMultiLookup(to: out)
    }

    func beginMultiLookup(count: Int, to out: ByteBuffer) {
        switch target {
        case .profiled: out.append("MGET")
        case .memcached: out.append("get")
        case .redis:
            out.append(byte: UInt8(ascii: "*"))
            out.append(decimal: count + 1)
            out.append("\r\n$4\r\nMGET\r\n")
        case .resp: preconditionFailure("options refuse mget for resp")
        }
    }

    func multiLookupKey(_ index: Int, missing: Bool, to out: ByteBuffer) {
        switch target {
        case .profiled, .memcached: out.append(byte: 0x20); key(index, missing, out)
        case .redis, .resp: respKey(index, missing, out)
        }
    }

    func endMultiLookup(to out: ByteBuffer) {
        switch target {
        case .profiled: out.append(byte: 0x0A)
        case .memcached: out.append("\r\n")
        case .redis, .resp: break
        }
    }

    func set(_ index: Int, to out: ByteBuffer) {
        switch target {
        case .profiled:
            out.append("SET "); key(index, false, out)
            out.append(byte: 0x20); out.append(space.name)
            out.append(byte: 0x20); out.append(space.portraitUri)
            out.append(byte: 0x0A)
        case .memcached:
            out.append("set "); key(index, false, out)
            out.append(" 0 0 "); out.append(decimal: space.value.count); out.append("\r\n")
            out.append(space.value); out.append("\r\n")
        case .redis:
            out.append("*3\r\n$3\r\nSET\r\n"); respKey(index, false, out); respBulk(space.value, out)
        case .resp:
            out.append("*6\r\n$4\r\nHSET\r\n"); respKey(index, false, out)
            out.append("$4\r\nname\r\n"); respBulk(space.name, out)
            out.append("$11\r\nportraitUri\r\n"); respBulk(space.portraitUri, out)
        }
    }

    /// Writes profiles `range` in one request (memcached and resp: `range` holds one id).
    func batchSet(_ range: Range<Int>, to out: ByteBuffer) {
        switch target {
        case .profiled:
            out.append("MSET")
            for index in range {
                out.append(byte: 0x20); key(index, false, out)
                out.append(byte: 0x20); out.append(space.name)
                out.append(byte: 0x20); out.append(space.portraitUri)
            }
            out.append(byte: 0x0A)
        case .memcached, .resp:
            set(range.lowerBound, to: out)
        case .redis:
            out.append(byte: UInt8(ascii: "*"))
            out.append(decimal: 1 + 2 * range.count)
            out.append("\r\n$4\r\nMSET\r\n")
            for index in range { respKey(index, false, out); respBulk(space.value, out) }
        }
    }

    /// Renames the profile (profiled and resp).
    func update(_ index: Int, missing: Bool, to out: ByteBuffer) {
        switch target {
        case .profiled:
            out.append("UPDATE "); key(index, missing, out)
            out.append(" name "); out.append(space.name); out.append(byte: 0x0A)
        case .resp:
            out.append("*4\r\n$4\r\nHSET\r\n"); respKey(index, missing, out)
            out.append("$4\r\nname\r\n"); respBulk(space.name, out)
        case .memcached, .redis: preconditionFailure("options refuse update for \(target)")
        }
    }

    func delete(_ index: Int, missing: Bool, to out: ByteBuffer) {
        switch target {
        case .profiled: out.append("DEL "); key(index, missing, out); out.append(byte: 0x0A)
        case .memcached: out.append("delete "); key(index, missing, out); out.append("\r\n")
        case .redis, .resp: out.append("*2\r\n$3\r\nDEL\r\n"); respKey(index, missing, out)
        }
    }

    func exists(_ index: Int, missing: Bool, to out: ByteBuffer) {
        switch target {
        case .profiled: out.append("EXISTS "); key(index, missing, out); out.append(byte: 0x0A)
        case .redis, .resp: out.append("*2\r\n$6\r\nEXISTS\r\n"); respKey(index, missing, out)
        case .memcached: preconditionFailure("options refuse exists for memcached")
        }
    }

    /// Profiled only: an operator's request; SCAN pages from the id given.
    func operatorRequest(_ operation: Operation, from index: Int, to out: ByteBuffer) {
        switch operation {
        case .count: out.append("COUNT\n")
        case .stats: out.append("STATS\n")
        case .recent: out.append("RECENT 20\n")
        default: out.append("SCAN "); key(index, false, out); out.append(" 100\n")
        }
    }

    /// The AUTH request for the configured token (profiled, redis and resp).
    func auth(to out: ByteBuffer) {
        guard let token else { return }
        switch target {
        case .profiled:
            var line = Array("AUTH ".utf8)
            ValueEncoder.append(token, to: &line)
            out.append(line); out.append(byte: 0x0A)
        case .redis, .resp:
            out.append("*2\r\n$4\r\nAUTH\r\n"); respBulk(token, out)
        case .memcached: preconditionFailure("options refuse --token for memcached")
        }
    }
}
