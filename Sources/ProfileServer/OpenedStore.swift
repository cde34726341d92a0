import ProfileStore

/// The store a server runs over, opened by the executable: the server knows it by its
/// interface alone, whichever store it is.
///
/// Made on the starting thread inside `Server.init`'s `openStore`, which then owns it.
public struct OpenedStore {
    public var store: any ProfileStore
    /// One per writer thread: one for a store of the server's own; several over a store that
    /// several servers share, each on a connection of its own, so that more commits run at once
    /// (a connection's writes all go to the same one, in order).
    public var writePaths: [any ProfileWritePath]
    /// Who reads the store where the cache cannot answer.
    public var readers: Readers
    /// What the log's `store opened` line says of it.
    public var logFields: KeyValuePairs<String, String>

    /// Who reads a store where the cache cannot answer.
    public enum Readers {
        /// Every worker, on its own loop, with a reader of its own that this opens: a store
        /// of the server's own, which only its own writes change.
        case workers(() throws -> any ProfileReader)
        /// Fetcher threads, one reader each, since every read is a round trip: a store
        /// several servers share, which tells of every change made anywhere.
        case fetchers(any SharedProfileStore, [any SharedProfileReader])
    }

    public init(store: any ProfileStore, writePaths: [any ProfileWritePath], readers: Readers,
                logFields: KeyValuePairs<String, String>) {
        precondition(!writePaths.isEmpty, "a store takes writes")
        self.store = store
        self.writePaths = writePaths
        self.readers = readers
        self.logFields = logFields
    }
}
