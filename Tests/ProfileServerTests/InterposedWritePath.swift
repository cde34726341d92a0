import ProfileStore

/// Stands between the writer and the store's write path, for tests: runs `beforeCommit` on the
/// committing thread before each commit, and calls a commit prompt only when `isPrompt` says
/// so too. Any thread.
final class InterposedWritePath: ProfileWritePath, @unchecked Sendable {
    private let path: any ProfileWritePath
    private let beforeCommit: @Sendable () -> Void
    private let isPrompt: @Sendable () -> Bool

    init(_ path: any ProfileWritePath, beforeCommit: @escaping @Sendable () -> Void,
         isPrompt: @escaping @Sendable () -> Bool) {
        self.path = path
        self.beforeCommit = beforeCommit
        self.isPrompt = isPrompt
    }

    func commit(_ units: [any WriteUnit], knownProfile: (UnsafeRawBufferPointer) -> KnownProfile,
                report: (Int, WriteResult) -> Void) {
        beforeCommit()
        path.commit(units, knownProfile: knownProfile, report: report)
    }

    var commitsPromptly: Bool { isPrompt() && path.commitsPromptly }
    var cacheAfterCommit: CacheAfterCommit { path.cacheAfterCommit }
    var rowCount: Int { path.rowCount }
    var statistics: WritePathStatistics { path.statistics }
    var writeRefusal: WriteRefusal? { path.writeRefusal }
    func close() throws { try path.close() }
}
