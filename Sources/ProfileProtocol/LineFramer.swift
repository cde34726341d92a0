import Glibc

/// What `LineFramer.nextLine` found at the front of a receive buffer.
///
/// A plain value; any thread may use it.
public enum FrameResult: Equatable, Sendable {
    /// A complete line. Its content is the first `contentCount` bytes, without the LF
    /// and without one CR directly before it; `consumed` counts through the LF.
    case line(contentCount: Int, consumed: Int)
    /// No LF yet, and at most `maxLine` bytes: read more.
    case needMore
    /// More than `maxLine` bytes have arrived and none of the first `maxLine` is an LF, so
    /// the line, counting its LF, cannot fit in `maxLine` bytes.
    case tooLong
}

/// Finds request lines in received bytes. Framing only: it neither tokenizes nor
/// copies, and decides once byte `maxLine + 1` is there. A caller that holds no more than
/// `maxLine` bytes (the server) asks its socket whether that byte has arrived.
///
/// Stateless; any thread may use it.
public enum LineFramer {
    /// Looks for the first line in `buffer`, the bytes received and not yet consumed.
    ///
    /// - Parameters:
    ///   - buffer: Received bytes; the LF is looked for in the first `maxLine`, and any byte
    ///     past them makes the line too long.
    ///   - maxLine: The longest allowed line, counting its LF; at least 1.
    /// - Returns: The line's extent, `.needMore`, or `.tooLong`.
    @inlinable
    public static func nextLine(in buffer: UnsafeRawBufferPointer, maxLine: Int) -> FrameResult {
        precondition(maxLine > 0, "maxLine must allow at least the LF")
        let window = min(buffer.count, maxLine)
        guard window > 0, let base = buffer.baseAddress, let lf = memchr(base, 0x0A, window) else {
            return buffer.count > maxLine ? .tooLong : .needMore
        }
        let lfIndex = base.distance(to: UnsafeRawPointer(lf))
        let hasCR = lfIndex > 0 && buffer[lfIndex - 1] == 0x0D
        return .line(contentCount: hasCR ? lfIndex - 1 : lfIndex, consumed: lfIndex + 1)
    }
}
