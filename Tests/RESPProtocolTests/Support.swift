@testable import RESPProtocol
import Testing

/// What a connection gets out of its input, with argument bytes copied out so tests can
/// compare them after the buffer is gone.
enum Event: Equatable {
    case request([[UInt8]])
    case skipped
    case error(RESPProtocolError)
}

/// The result of decoding a stream the way a server loop would.
struct Decoded: Equatable {
    var events: [Event] = []
    /// Bytes left unconsumed when the input ran out (and no error stopped it).
    var pending = 0
}

/// Feeds `input` to a decoder `chunkSize` bytes at a time, as a connection would: it buffers
/// what arrived, takes every whole request off the front, keeps the rest and its decoding
/// state for the next chunk, and stops at the first error.
///
/// Each call decodes a fresh copy of the buffer, so a decoder that kept pointers into an
/// earlier one, or counted on the buffer not moving, gets caught.
func decodeStream(
    _ input: [UInt8], chunkSize: Int = .max, limits: RESPLimits = RESPLimits(), authenticated: Bool = true,
    decoder: RESPDecoder? = nil
) -> Decoded {
    let decoder = decoder ?? RESPDecoder(limits: limits)
    var result = Decoded()
    var buffer: [UInt8] = []
    var state = RESPDecodeState()
    var offset = 0
    feeding: while offset < input.count {
        let chunkEnd = offset + min(chunkSize, input.count - offset)
        buffer += input[offset..<chunkEnd]
        offset = chunkEnd
        while !buffer.isEmpty {
            let copy = buffer
            let outcome = copy.withUnsafeBytes { raw -> RESPDecodeResult in
                let outcome = decoder.decode(raw, state: &state, authenticated: authenticated)
                if case .request = outcome {
                    result.events.append(.request(decoder.arguments.map { Array($0) }))
                }
                return outcome
            }
            switch outcome {
            case .request(let consumed):
                #expect(consumed <= buffer.count)
                buffer.removeFirst(consumed)
            case .skipped(let consumed):
                #expect(consumed <= buffer.count)
                result.events.append(.skipped)
                buffer.removeFirst(consumed)
            case .needMore:
                #expect(decoder.arguments.isEmpty)
                continue feeding
            case .error(let error):
                result.events.append(.error(error))
                return result
            }
        }
    }
    result.pending = buffer.count
    return result
}

/// Decodes `text` in one piece.
func decodeStream(_ text: String, limits: RESPLimits = RESPLimits(), authenticated: Bool = true) -> Decoded {
    decodeStream(bytes(text), limits: limits, authenticated: authenticated)
}

/// The events of `input` decoded in one piece, checked to be the same at every chunk size
/// (at a few, for inputs too long to try them all).
func events(_ input: [UInt8], limits: RESPLimits = RESPLimits(), authenticated: Bool = true,
            sourceLocation: SourceLocation = #_sourceLocation) -> [Event] {
    let whole = decodeStream(input, limits: limits, authenticated: authenticated)
    let chunkSizes = input.count <= 400 ? Array(1..<max(input.count, 1)) : [input.count / 7 + 1, input.count / 2 + 1]
    for chunkSize in chunkSizes {
        let chunked = decodeStream(input, chunkSize: chunkSize, limits: limits, authenticated: authenticated)
        #expect(chunked == whole, "chunk size \(chunkSize)", sourceLocation: sourceLocation)
    }
    return whole.events
}

func events(_ text: String, limits: RESPLimits = RESPLimits(), authenticated: Bool = true,
            sourceLocation: SourceLocation = #_sourceLocation) -> [Event] {
    events(bytes(text), limits: limits, authenticated: authenticated, sourceLocation: sourceLocation)
}

/// A request event of these arguments.
func request(_ arguments: String...) -> Event {
    .request(arguments.map(bytes))
}

/// The multibulk encoding of `arguments`.
func multibulk(_ arguments: [[UInt8]]) -> [UInt8] {
    var out = bytes("*\(arguments.count)\r\n")
    for argument in arguments {
        out += bytes("$\(argument.count)\r\n") + argument + bytes("\r\n")
    }
    return out
}

func multibulk(_ arguments: String...) -> [UInt8] {
    multibulk(arguments.map(bytes))
}

func bytes(_ text: String) -> [UInt8] {
    Array(text.utf8)
}

/// `count` copies of `byte`.
func repeated(_ byte: Character, _ count: Int) -> [UInt8] {
    [UInt8](repeating: byte.asciiValue!, count: count)
}

/// Runs a pointer-based writer into a buffer with guard bytes after `count`, and checks it
/// wrote exactly `count` bytes and nothing past them.
func written(count: Int, _ write: (UnsafeMutableRawPointer) -> Int) -> (bytes: [UInt8], exact: Bool) {
    let guardBytes = 16
    var buffer = [UInt8](repeating: 0xEE, count: count + guardBytes)
    let n = buffer.withUnsafeMutableBytes { write($0.baseAddress!) }
    let untouched = buffer[count...].allSatisfy { $0 == 0xEE }
    return (Array(buffer[..<min(n, count)]), n == count && untouched)
}

/// The reply an error writes, checked against its `replyCount`.
func reply(_ error: RESPProtocolError) -> [UInt8] {
    let result = written(count: error.replyCount) { error.write(to: $0) }
    #expect(result.exact, "\(error)")
    return result.bytes
}

/// Runs `body` with `arguments` as a decoder hands them out.
func withArguments<R>(_ arguments: [[UInt8]], _ body: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> R) -> R {
    let storage = arguments.map { argument -> UnsafeMutableRawBufferPointer in
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: argument.count, alignment: 1)
        copy.copyBytes(from: argument)
        return copy
    }
    defer { storage.forEach { $0.deallocate() } }
    let views = storage.map { UnsafeRawBufferPointer($0) }
    return views.withUnsafeBufferPointer(body)
}
