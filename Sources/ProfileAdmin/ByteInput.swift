import Glibc

/// Why input could not be read.
///
/// Threading: a plain value; any thread.
public struct InputError: Error, CustomStringConvertible, Sendable {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// A stream of bytes the import parsers pull from.
///
/// Threading: one thread at a time (the one running the parser).
public protocol ByteInput: AnyObject {
    /// Fills the start of `buffer`; returns how many bytes, 0 at the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(InputError) -> Int
}

/// A file descriptor read with read(2); the descriptor is closed with the input.
///
/// Threading: one thread at a time.
public final class FileInput: ByteInput {
    public let name: String
    private let fd: Int32
    /// The size when the file is a regular file, for progress in percent.
    public let size: Int?

    /// Opens `path`, or takes standard input for `-`.
    public init(path: String) throws(InputError) {
        name = path
        if path == "-" {
            fd = dup(0)
        } else {
            fd = open(path, O_RDONLY | O_CLOEXEC)
        }
        guard fd >= 0 else {
            throw InputError("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        var status = stat()
        if fstat(fd, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG {
            size = Int(status.st_size)
        } else {
            size = nil
        }
        if size != nil {
            posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        }
    }

    deinit { close(fd) }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(InputError) -> Int {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            throw InputError("cannot read \(name): \(String(cString: strerror(errno)))")
        }
    }
}

/// Bytes in memory handed out at most `chunkSize` at a time, so tests can cut
/// the same input at every place.
///
/// Threading: one thread at a time.
public final class MemoryInput: ByteInput {
    private let bytes: [UInt8]
    private let chunkSize: Int
    private var offset = 0

    public init(_ bytes: [UInt8], chunkSize: Int = 1 << 18) {
        self.bytes = bytes
        self.chunkSize = max(1, chunkSize)
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(InputError) -> Int {
        let n = min(chunkSize, buffer.count, bytes.count - offset)
        bytes.withUnsafeBytes { source in
            if n > 0 { buffer.baseAddress!.copyMemory(from: source.baseAddress! + offset, byteCount: n) }
        }
        offset += n
        return n
    }
}

/// A fixed buffer over a `ByteInput`: the parsers scan `bytes[position..<end]`
/// and call `refill` when they need more, so memory stays at one chunk
/// whatever the input's size.
///
/// Threading: one thread at a time.
final class ChunkBuffer {
    /// 256 KiB: large enough that read(2) costs little per byte.
    static let defaultCapacity = 1 << 18

    let input: any ByteInput
    let base: UnsafeMutableRawPointer
    let capacity: Int
    var position = 0
    var end = 0
    private(set) var isAtEnd = false
    /// Bytes before `base`'s first byte that were consumed and dropped.
    private var dropped = 0

    init(_ input: any ByteInput, capacity: Int = ChunkBuffer.defaultCapacity) {
        self.input = input
        self.capacity = capacity
        base = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    /// Bytes of the input consumed so far.
    var consumed: Int { dropped + position }

    /// Keeps `bytes[keepFrom..<end]`, moves it to the front, and reads more
    /// behind it; false at the end of input. `keepFrom` comes back as 0.
    func refill(keepingFrom keepFrom: inout Int) throws(InputError) -> Bool {
        if isAtEnd { return false }
        let kept = end - keepFrom
        if keepFrom > 0 {
            if kept > 0 { memmove(base, base + keepFrom, kept) }
            dropped += keepFrom
            position -= keepFrom
            end = kept
            keepFrom = 0
        }
        guard end < capacity else { return true }
        let n = try input.read(into: UnsafeMutableRawBufferPointer(start: base + end, count: capacity - end))
        if n == 0 {
            isAtEnd = true
            return false
        }
        end += n
        return true
    }

    /// Reads more when everything was consumed; false at the end of input.
    func refill() throws(InputError) -> Bool {
        var keep = position
        return try refill(keepingFrom: &keep)
    }
}
