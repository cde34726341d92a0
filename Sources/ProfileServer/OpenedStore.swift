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
    /// Opens a worker's own reader, for a store the workers read themselves; nil for a store
    /// read by fetcher threads (`fetcherReaders`).
    public var workerReader: (() throws -> any ProfileReader)?
    /// The fetcher threads' readers, one each, for a shared store.
    public var fetcherReaders: [any SharedProfileReader]
    /// What the log's `store opened` line says of it.
    public var logFields: KeyValuePairs<String, String>

    public init(store: any ProfileStore, writePaths: [any ProfileWritePath], workerReader: (() throws -> any ProfileReader)?,
                fetcherReaders: [any SharedProfileReader], logFields: KeyValuePairs<String, String>) {
        precondition(!writePaths.isEmpty, "a store takes writes")
        precondition((workerReader == nil) != fetcherReaders.isEmpty, "a store is read by the workers or by fetchers")
        self.store = store
        self.writePaths = writePaths
        self.workerReader = workerReader
        self.fetcherReaders = fetcherReaders
        self.logFields = logFields
    }
}
