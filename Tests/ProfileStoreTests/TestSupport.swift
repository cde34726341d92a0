import Glibc
import ProfileStore
@testable import ProfileStoreSQLite
import Testing

/// A fresh directory from mkdtemp, removed with everything in it on deinit.
final class TemporaryDirectory {
    let path: String

    init() {
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? P_tmpdir
        var template = Array("\(base)/profilestore-test.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            fatalError("mkdtemp failed: \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
    }

    deinit {
        removeTree(path)
    }

    func file(_ name: String) -> String { path + "/" + name }
}

private func removeTree(_ path: String) {
    var status = stat()
    guard lstat(path, &status) == 0 else { return }
    if (status.st_mode & S_IFMT) == S_IFDIR, let directory = opendir(path) {
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != "." && name != ".." { removeTree(path + "/" + name) }
        }
        closedir(directory)
        rmdir(path)
    } else {
        unlink(path)
    }
}

/// A profile copied out of a ProfileRow, for comparing.
struct Profile: Equatable, CustomStringConvertible {
    var userId: String
    var name: String
    var portraitUri: String

    init(_ userId: String, _ name: String, _ portraitUri: String) {
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }

    init(_ row: ProfileRow) {
        self.init(String(decoding: row.userId, as: UTF8.self), String(decoding: row.name, as: UTF8.self),
                  String(decoding: row.portraitUri, as: UTF8.self))
    }

    var description: String { "(\(userId), \(name), \(portraitUri))" }
}

func withBytes<R>(_ text: String, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try Array(text.utf8).withUnsafeBytes(body)
}

extension UpsertBatch {
    func append(_ profiles: [Profile]) throws {
        for profile in profiles {
            try withBytes(profile.userId) { id in
                try withBytes(profile.name) { name in
                    try withBytes(profile.portraitUri) { uri in try append(userId: id, name: name, portraitUri: uri) }
                }
            }
        }
    }
}

extension ProfileWriter {
    /// Upserts the profiles as one batch, so each is newer than the ones before it.
    func upsert(_ profiles: [Profile]) throws {
        let batch = makeUpsertBatch()
        try batch.append(profiles)
        try upsert(batch)
    }

    func upsert(_ profile: Profile) throws {
        try upsert([profile])
    }
}

extension ProfileReader {
    /// Profiles in the store, counted by paging through them (and looking up the empty id,
    /// which only an offline import can store and no page starts before).
    func count() throws -> Int {
        var count = try get("") == nil ? 0 : 1
        var after: [UInt8] = []
        while true {
            var page: [UInt8]?
            var rows = 0
            try after.withUnsafeBytes { bytes in
                try scan(after: bytes, limit: 1000) { row in
                    rows += 1
                    page = Array(row.userId)
                }
            }
            count += rows
            guard rows == 1000, let last = page else { return count }
            after = last
        }
    }

    func get(_ userId: String) throws -> Profile? {
        try withBytes(userId) { id in try lookup(id) { $0.map(Profile.init) } }
    }

    func recent(_ limit: Int) throws -> [String] {
        var ids: [String] = []
        try recent(limit: limit) { ids.append(Profile($0).userId) }
        return ids
    }

    func scan(after: String, limit: Int) throws -> [String] {
        var ids: [String] = []
        try withBytes(after) { after in
            try scan(after: after, limit: limit) { ids.append(Profile($0).userId) }
        }
        return ids
    }
}

/// The whole content of a file, to check that it was left untouched.
func contents(of path: String) -> [UInt8] {
    let descriptor = open(path, O_RDONLY)
    guard descriptor >= 0 else { return [] }
    defer { close(descriptor) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count <= 0 { return bytes }
        bytes += chunk[..<count]
    }
}

func write(_ bytes: [UInt8], to path: String) {
    let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    precondition(descriptor >= 0, "cannot create \(path)")
    defer { close(descriptor) }
    let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
    precondition(written == bytes.count, "short write to \(path)")
}

/// Opens a store, failing the test with the error when it cannot.
func openStore(_ path: String, busyTimeoutMilliseconds: Int32 = 5000) throws -> SQLiteProfileStore {
    try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
}

/// The StoreError that `body` throws; records an issue when it throws
/// nothing or something else. Unlike `#expect(throws:)`, `body` may hold
/// expectations of its own.
func storeError(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> StoreError? {
    do {
        try body()
        Issue.record("expected a StoreError, nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as StoreError {
        return error
    } catch {
        Issue.record("expected a StoreError, got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// The names in `directory`, sorted, without "." and "..".
func fileNames(in directory: String) -> [String] {
    var names: [String] = []
    guard let handle = opendir(directory) else { return names }
    defer { closedir(handle) }
    while let entry = readdir(handle) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) {
            String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
}

/// `count` distinct ids in an order unrelated to id order, so that a batch must sort them.
func scrambledIds(_ count: Int) -> [String] {
    (0..<count).map { String(($0 &* 7919) % count) }
}

/// Each id written twice in one batch, "first" then "second": the second half wins.
func writtenTwice(_ ids: [String]) -> [Profile] {
    ids.map { Profile($0, "first", "") } + ids.map { Profile($0, "second", "") }
}

/// What a store holds after `writtenTwice(ids)`: every id once, with the second write's values,
/// the newest last in input order.
func expectSecondWritesWon(_ reader: any ProfileReader, _ ids: [String],
                           sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(try reader.count() == ids.count, sourceLocation: sourceLocation)
    #expect(try reader.recent(3) == Array(ids.suffix(3).reversed()), sourceLocation: sourceLocation)
    #expect(try reader.get(ids[0]) == Profile(ids[0], "second", ""), sourceLocation: sourceLocation)
}
