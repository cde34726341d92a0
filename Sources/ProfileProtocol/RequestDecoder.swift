/// The outcome of `RequestDecoder.decode`.
///
/// A plain value; any thread may use it.
public enum DecodeResult: Sendable {
    /// An empty or all-blank line: it gets no reply.
    case empty
    /// A well-formed line naming this command; its arguments are not checked yet.
    case request(Verb)
    /// PARSE or UNKNOWN.
    case error(ProtocolError)
}

/// Tokenizes and decodes request lines without allocating.
///
/// Not thread-safe: make one per thread and reuse it for every line. It owns
/// preallocated token storage; quoted tokens are unescaped in place in the caller's
/// line buffer, and the arguments and commands it hands out point into that buffer,
/// so they are valid until the buffer changes or the next `decode`.
///
/// Decoding is two steps so the server can check NOAUTH and DENIED between them,
/// keeping the protocol's error order PARSE, UNKNOWN, NOAUTH, DENIED, ARGS, TOOLARGE:
/// `decode` reports PARSE and UNKNOWN, `command` reports ARGS and TOOLARGE.
public final class RequestDecoder {
    /// Tokens stored per line: the verb and the largest MSET. Tokens beyond it are
    /// still checked and counted, so a longer request gets the right error.
    @usableFromInline
    static var tokenCapacity: Int { 1 + 3 * Limits.maxTriples }

    @usableFromInline
    let spans: UnsafeMutablePointer<Span>
    @usableFromInline
    var line: UnsafeMutableRawPointer?
    /// Tokens in the last line, the verb included; may exceed `tokenCapacity`.
    @usableFromInline
    var tokenCount = 0
    /// The verb of the last line decoded as a request.
    var verb: Verb?
    /// Which argument positions modulo 3 hold an empty token beyond `tokenCapacity`
    /// (bit k for k): an empty id anywhere in MGET, or an empty userId in MSET, is
    /// ARGS, and ARGS outranks the TOOLARGE count that such a request also has.
    var emptyUnstoredPositions: UInt8 = 0

    public init() {
        spans = .allocate(capacity: Self.tokenCapacity)
    }

    deinit {
        spans.deallocate()
    }

    /// Tokenizes `line` and looks up its verb.
    ///
    /// Every token of the line is checked, including those beyond the stored
    /// capacity, so PARSE outranks UNKNOWN. Quoted tokens are unescaped in place.
    ///
    /// - Parameter line: The line's content, without the LF and the CR before it;
    ///   it must stay unchanged while the arguments are in use.
    /// - Returns: `.empty`, `.request(verb)`, or `.error` with PARSE or UNKNOWN.
    public func decode(_ line: UnsafeMutableRawBufferPointer) -> DecodeResult {
        verb = nil
        tokenCount = 0
        emptyUnstoredPositions = 0
        guard let base = line.baseAddress else {
            self.line = nil
            return .empty
        }
        self.line = base
        var cursor = TokenCursor(base: base, count: line.count)
        let capacity = Self.tokenCapacity
        var count = 0
        var unstoredEmpty: UInt8 = 0
        do {
            while let span = try cursor.next() {
                if count < capacity {
                    spans[count] = span
                } else if span.count == 0 {
                    unstoredEmpty |= 1 << ((count - 1) % 3)
                }
                count += 1
            }
        } catch {
            return .error(error)
        }
        tokenCount = count
        emptyUnstoredPositions = unstoredEmpty
        guard count > 0 else {
            return .empty
        }
        let verbToken = token(0)
        guard let found = Verb.lookup(UnsafeRawBufferPointer(verbToken)) else {
            return .error(ProtocolError(unknownVerb: UnsafeRawBufferPointer(verbToken)))
        }
        verb = found
        return .request(found)
    }

    /// The number of tokens after the verb in the last line decoded. It may exceed
    /// what `argument(_:)` can give, so commands check it before reading arguments.
    @inlinable
    public var argumentCount: Int {
        tokenCount > 0 ? tokenCount - 1 : 0
    }

    /// The bytes of argument `index` (0 is the first token after the verb), unescaped.
    ///
    /// - Precondition: `index` is below both `argumentCount` and 3,000.
    @inlinable @inline(__always)
    public func argument(_ index: Int) -> UnsafeRawBufferPointer {
        precondition(index >= 0 && index < min(argumentCount, Self.tokenCapacity - 1), "argument index out of range")
        return UnsafeRawBufferPointer(token(index + 1))
    }

    @inlinable @inline(__always)
    func token(_ index: Int) -> UnsafeMutableRawBufferPointer {
        let span = spans[index]
        return UnsafeMutableRawBufferPointer(start: line.unsafelyUnwrapped + span.start, count: span.count)
    }
}

@available(*, unavailable)
extension RequestDecoder: Sendable {}
