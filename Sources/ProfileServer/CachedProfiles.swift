import ProfileCache
import ProfileProtocol
import ProfileStore

/// Writes `row`'s VALUE line at `out` (room for `ReplyEncoder.valueLineCount` bytes) and
/// returns the cache's view of it: the line, encoded once for every GET that hits it, and
/// the raw values the RESP front answers with, found in the line wherever it carries them as
/// they are (else the row's own bytes, which the cache copies).
///
/// The views are valid while `out` and the row's bytes are; any thread, for its own memory.
func encodeForCache(_ row: ProfileRow, at out: UnsafeMutableRawPointer) -> EncodedProfile {
    let layout = ReplyEncoder.writeValueLineLocatingValues(userId: row.userId, name: row.name,
                                                           portraitUri: row.portraitUri, to: out)
    func value(_ raw: UnsafeRawBufferPointer, at offset: Int?) -> UnsafeRawBufferPointer {
        guard let offset else { return raw }
        return UnsafeRawBufferPointer(start: out + offset, count: raw.count)
    }
    return EncodedProfile(reply: UnsafeRawBufferPointer(start: out, count: layout.count),
                          userIdInReply: layout.userId.map { UnsafeRawBufferPointer(start: out + $0, count: row.userId.count) },
                          name: value(row.name, at: layout.name),
                          portraitUri: value(row.portraitUri, at: layout.portraitUri))
}
