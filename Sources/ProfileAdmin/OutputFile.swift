import Glibc

/// Buffered writes to a file descriptor: standard output or a file `-o` names.
///
/// Threading: one thread at a time.
final class OutputFile {
    private let fd: Int32
    private let ownsDescriptor: Bool
    private let name: String
    private var buffer: [UInt8] = []
    private static let flushAt = 1 << 18

    /// Standard output.
    init() {
        fd = 1
        ownsDescriptor = false
        name = "standard output"
        buffer.reserveCapacity(Self.flushAt + 8192)
    }

    /// Creates or truncates `path`.
    init(path: String) throws(AdminError) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw AdminError.file("cannot create \(path): \(String(cString: strerror(errno)))") }
        ownsDescriptor = true
        name = path
        buffer.reserveCapacity(Self.flushAt + 8192)
    }

    deinit {
        if ownsDescriptor { close(fd) }
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
}
