import Glibc
@testable import ProfileCache

/// What a lookup saw, with the reply copied out so it can be compared after the lock is gone.
enum Seen: Equatable {
    case hit(String)
    case absent
    case miss
}

/// A reply line as the server encodes it; `encodedId` is the id as it appears on the wire.
func replyLine(_ encodedId: String, name: String = "Fran", uri: String = "https://cdn.example/p.png") -> String {
    "VALUE \(encodedId) \(name) \(uri)\n"
}

extension ProfileCache {
    func seen(_ id: String) -> Seen {
        seen(Array(id.utf8))
    }

    func seen(_ id: [UInt8]) -> Seen {
        id.withUnsafeBytes { key in
            lookup(key) { outcome in
                switch outcome {
                case .hit(let profile): .hit(String(decoding: profile.reply, as: UTF8.self))
                case .absent: .absent
                case .miss: .miss
                }
            }
        }
    }

    /// The ticket a miss hands out, or nil when the id is cached.
    func missTicket(_ id: String) -> FillTicket? {
        Array(id.utf8).withUnsafeBytes { key in
            lookup(key) { outcome in
                if case .miss(let ticket) = outcome { return ticket }
                return nil
            }
        }
    }

    func prefetch(_ ids: [[UInt8]]) {
        let joined = ids.flatMap { $0 }
        joined.withUnsafeBytes { all in
            var offset = 0
            var slots = ids.map { id in
                defer { offset += id.count }
                return PrefetchSlot(key: UnsafeRawBufferPointer(rebasing: all[offset..<offset + id.count]))
            }
            slots.withUnsafeMutableBufferPointer { prefetch($0) }
        }
    }

    /// Caches `reply` for `id` whether or not it is cached now: an update, and where that left
    /// nothing cached, a fill.
    func store(_ id: String, _ reply: String?) {
        store(Array(id.utf8), reply.map { Array($0.utf8) })
    }

    func store(_ id: [UInt8], _ reply: [UInt8]?) {
        update(id, reply)
        let ticket: FillTicket? = id.withUnsafeBytes { key in
            lookup(key) { outcome in
                if case .miss(let ticket) = outcome { return ticket }
                return nil
            }
        }
        if let ticket { fill(id, reply, ticket) }
    }

    func update(_ id: String, _ reply: String?) {
        update(Array(id.utf8), reply.map { Array($0.utf8) })
    }

    func update(_ id: [UInt8], _ reply: [UInt8]?) {
        id.withUnsafeBytes { key in
            if let reply {
                reply.withUnsafeBytes { update(key, profile: encodedProfile($0)) }
            } else {
                update(key, profile: nil)
            }
        }
    }

    func fill(_ id: String, _ reply: String?, _ ticket: FillTicket) {
        fill(Array(id.utf8), reply.map { Array($0.utf8) }, ticket)
    }

    func fill(_ id: [UInt8], _ reply: [UInt8]?, _ ticket: FillTicket) {
        id.withUnsafeBytes { key in
            if let reply {
                reply.withUnsafeBytes { fill(key, profile: encodedProfile($0), ticket: ticket) }
            } else {
                fill(key, profile: nil, ticket: ticket)
            }
        }
    }
}

/// A reply with its values found in it, as the server hands the cache a VALUE line: the two
/// tokens after the id when the line has the `VALUE <id> <name> <uri>` shape, else none.
func encodedProfile(_ reply: UnsafeRawBufferPointer) -> EncodedProfile {
    var spaces: [Int] = []
    // An index loop: threads of the concurrency tests first instantiating the generic
    // metadata of `enumerated()` together hung in the Swift runtime under ThreadSanitizer.
    for offset in 0..<reply.count where reply[offset] == 0x20 { spaces.append(offset) }
    let empty = UnsafeRawBufferPointer(start: nil, count: 0)
    guard spaces.count == 3, reply.last == 0x0A else { return EncodedProfile(reply: reply, name: empty, portraitUri: empty) }
    return EncodedProfile(reply: reply, userIdInReply: UnsafeRawBufferPointer(rebasing: reply[spaces[0] + 1..<spaces[1]]),
                          name: UnsafeRawBufferPointer(rebasing: reply[spaces[1] + 1..<spaces[2]]),
                          portraitUri: UnsafeRawBufferPointer(rebasing: reply[spaces[2] + 1..<reply.count - 1]))
}
