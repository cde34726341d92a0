import ProfileCache
import ProfileStore

/// How the cache keeps a profile: the reply one front encodes once for it, with its values
/// found in it (`EncodedProfile`), so that a hit on that front copies the reply whole and any
/// other front builds its own from the values. The core calls it for every row it puts in the
/// cache (a miss read from the store, a fetcher's answer, a committed write) and knows nothing
/// of the bytes; the front that answers most lookups supplies it.
///
/// Immutable; any thread may use it.
package protocol CachedProfileEncoding: Sendable {
    /// The most bytes `encode` writes for a profile of the longest values.
    var capacity: Int { get }
    /// Writes `row`'s encoding at `out` and returns the cache's view of it, valid while
    /// `out` and the row's bytes are.
    func encode(_ row: ProfileRow, at out: UnsafeMutableRawPointer) -> EncodedProfile
}
