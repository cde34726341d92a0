import Glibc

/// Buffered writes to a file descriptor: standard output, or a file `-o` names.
///
/// A regular file is written under a temporary name beside it and takes its place only at
/// `commit`, so an export that fails leaves the file as it was.
///
/// Threading: one thread at a time.
final class OutputFile {
    private let fd: Int32
    private let ownsDescriptor: Bool
    private let name: String
    /// The file `commit` renames `temporaryPath` over; nil when writing in place.
    private let replacedPath: String?
    /// Where the output is written until `commit`; nil once committed or when writing in place.
    private var temporaryPath: String?
    private var buffer: [UInt8] = []
    private static let flushAt = 1 << 18

    /// Standard output.
    init() {
        fd = 1
        ownsDescriptor = false
        name = "standard output"
        replacedPath = nil
        temporaryPath = nil
        buffer.reserveCapacity(Self.flushAt + 8192)
    }

    /// A new file that will replace `path` at `commit`: in the same directory, so the rename
    /// cannot cross file systems, and with the mode `path` has (or would get when created).
    /// What is not a regular file, such as a terminal or a pipe, is written in place.
    init(replacing path: String) throws(AdminError) {
        name = path
        ownsDescriptor = true
        var target = path
        var status = stat()
        if lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFLNK, let resolved = realpath(path, nil) {
            // Replace what the link points at and keep the link.
            target = String(cString: resolved)
            free(resolved)
        }
        let exists = stat(target, &status) == 0
        if exists && (status.st_mode & S_IFMT) != S_IFREG {
            fd = open(target, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw AdminError.file("cannot open \(path): \(String(cString: strerror(errno)))") }
            replacedPath = nil
            temporaryPath = nil
        } else {
            var descriptor: Int32 = -1
            var temporary = ""
            repeat {
                temporary = target + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
                // O_EXCL makes the name ours; the umask applies to 0644 as it would to a new `path`.
                descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            } while descriptor < 0 && errno == EEXIST
            guard descriptor >= 0 else {
                throw AdminError.file("cannot create a file beside \(path): \(String(cString: strerror(errno)))")
            }
            if exists { fchmod(descriptor, status.st_mode & 0o7777) }
            fd = descriptor
            replacedPath = target
            temporaryPath = temporary
        }
        buffer.reserveCapacity(Self.flushAt + 8192)
    }

    deinit {
        if ownsDescriptor { close(fd) }
        if let temporaryPath { unlink(temporaryPath) }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(AdminError) {
        buffer.append(contentsOf: bytes)
        if buffer.count >= Self.flushAt { try flush() }
    }

    func write(_ text: String) throws(AdminError) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= Self.flushAt { try flush() }
    }

    /// Appends without flushing; for encoders that build a record in place.
    func append(_ byte: UInt8) { buffer.append(byte) }
    func append(_ text: StaticString) {
        buffer.append(contentsOf: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }
    func append(_ bytes: UnsafeRawBufferPointer) { buffer.append(contentsOf: bytes) }

    /// What was appended and not flushed, as text; empties the buffer.
    func takeText() -> String {
        defer { buffer.removeAll(keepingCapacity: true) }
        return String(decoding: buffer, as: UTF8.self)
    }

    func flushIfFull() throws(AdminError) {
        if buffer.count >= Self.flushAt { try flush() }
    }

    func flush() throws(AdminError) {
        var offset = 0
        while offset < buffer.count {
            let n = buffer.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw AdminError.file("cannot write \(name): \(String(cString: strerror(errno)))")
            }
            offset += n
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered, syncs it to disk and, for a file written under a temporary
    /// name, renames it over the file it replaces.
    func commit() throws(AdminError) {
        try flush()
        guard let temporaryPath, let replacedPath else { return }
        guard fsync(fd) == 0 else { throw AdminError.file("cannot write \(name): \(String(cString: strerror(errno)))") }
        guard rename(temporaryPath, replacedPath) == 0 else {
            throw AdminError.file("cannot replace \(name): \(String(cString: strerror(errno)))")
        }
        self.temporaryPath = nil
    }
}
