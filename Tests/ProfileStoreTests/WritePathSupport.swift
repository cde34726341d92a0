import CSQLite
import Glibc
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite

/// A write unit built from strings, owning the bytes its operations point at.
final class TestUnit: WriteUnit {
    enum Edit {
        case keep, set(String), setIfEmpty(String)
    }

    enum Operation {
        case put(String, String, String)
        case patch(String, name: Edit, portraitUri: Edit, createsMissing: Bool, removesEmptied: Bool)
        case remove(String)
        case read(String)
        case removeAll
    }

    let operations: [Operation]
    private var buffers: [UnsafeMutableRawBufferPointer] = []

    init(_ operations: [Operation]) {
        self.operations = operations
    }

    convenience init(_ operation: Operation) {
        self.init([operation])
    }

    deinit {
        for buffer in buffers { buffer.deallocate() }
    }

    private func bytes(_ text: String) -> UnsafeRawBufferPointer {
        let utf8 = Array(text.utf8)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(utf8.count, 1), alignment: 1)
        buffer.copyBytes(from: utf8)
        buffers.append(buffer)
        return UnsafeRawBufferPointer(rebasing: buffer[0..<utf8.count])
    }

    private func edit(_ edit: Edit) -> FieldEdit {
        switch edit {
        case .keep: .keep
        case .set(let value): .set(bytes(value))
        case .setIfEmpty(let value): .setIfEmpty(bytes(value))
        }
    }

    var operationCount: Int { operations.count }

    func operation(at index: Int) -> WriteOperation {
        switch operations[index] {
        case .put(let id, let name, let uri):
            .put(userId: bytes(id), name: bytes(name), portraitUri: bytes(uri))
        case .patch(let id, let name, let uri, let creates, let removes):
            .patch(userId: bytes(id), name: edit(name), portraitUri: edit(uri), createsMissing: creates,
                   removesEmptied: removes)
        case .remove(let id): .remove(userId: bytes(id))
        case .read(let id): .read(userId: bytes(id))
        case .removeAll: .removeAll
        }
    }
}

/// One operation's outcome, copied out of the report.
struct Outcome: Equatable, CustomStringConvertible {
    var before: ProfileState
    var after: Profile?
    var changed: Bool

    var description: String { "(\(before), \(after.map(\.description) ?? "absent"), changed: \(changed))" }
}

extension ProfileWritePath {
    /// Commits the units; returns each unit's outcomes, or its error.
    func commit(_ units: [TestUnit], known: (String) -> KnownProfile = { _ in .unknown })
        -> [Result<[Outcome], StoreError>] {
        var results: [Result<[Outcome], StoreError>?] = Array(repeating: nil, count: units.count)
        commit(units, knownProfile: { known(String(decoding: $0, as: UTF8.self)) }, report: { index, result in
            switch result {
            case .failed(let error):
                results[index] = .failure(error)
            case .committed(let outcomes):
                results[index] = .success((0..<units[index].operationCount).map { i in
                    Outcome(before: outcomes.before(i), after: outcomes.after(i).map(Profile.init),
                            changed: outcomes.changed(i))
                })
            }
        })
        return results.map { $0! }
    }

    /// Commits one unit and returns its outcomes; fails the test on an error.
    @discardableResult
    func commit(_ unit: TestUnit) throws -> [Outcome] {
        try commit([unit])[0].get()
    }
}

/// Waits up to ten seconds for `condition`.
func eventually(_ condition: () throws -> Bool) rethrows -> Bool {
    for _ in 0..<1000 {
        if try condition() { return true }
        usleep(10_000)
    }
    return false
}

/// What the table itself holds (id to name), read straight from the file beside the store.
func tableRows(_ path: String) -> [String: String] {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { return [:] }
    defer { sqlite3_close(handle) }
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(handle, "SELECT user_id, name FROM profiles", -1, &statement, nil) == SQLITE_OK else { return [:] }
    defer { sqlite3_finalize(statement) }
    var rows: [String: String] = [:]
    while sqlite3_step(statement) == SQLITE_ROW {
        rows[String(cString: sqlite3_column_text(statement, 0))] = String(cString: sqlite3_column_text(statement, 1))
    }
    return rows
}

/// The write log's segment files beside the store at `path`.
func segments(_ path: String) -> [UInt64] { WriteLogFile.segmentNumbers(of: path) }
