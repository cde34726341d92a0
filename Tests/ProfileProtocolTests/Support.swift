@testable import ProfileProtocol

/// A decoded request with its bytes copied out of the line buffer, so tests can
/// compare it after the buffer is gone.
enum Decoded: Equatable {
    case empty
    case failure(ErrorCode, reply: String)
    case ping, count, stats, flushall, quit
    case get([UInt8]), exists([UInt8]), del([UInt8])
    case mget([[UInt8]])
    case set([UInt8], [UInt8], [UInt8])
    case mset([[UInt8]])
    case update([UInt8], name: [UInt8]?, portraitUri: [UInt8]?)
    case recent(Int)
    case scan([UInt8], Int)
    case auth([UInt8])

    var code: ErrorCode? {
        if case .failure(let code, _) = self { code } else { nil }
    }

    var reply: String? {
        if case .failure(_, let reply) = self { reply } else { nil }
    }
}

/// Runs both decoding steps on a copy of `line`, as the server would.
func decode(_ line: [UInt8], with decoder: RequestDecoder = RequestDecoder()) -> Decoded {
    var buffer = line
    return buffer.withUnsafeMutableBytes { raw in
        switch decoder.decode(raw) {
        case .empty:
            return .empty
        case .error(let error):
            return .failure(error.code, reply: error.description)
        case .request:
            switch decoder.command() {
            case .failure(let error):
                return .failure(error.code, reply: error.description)
            case .success(let command):
                return copied(command, decoder)
            }
        }
    }
}

func decode(_ line: String) -> Decoded {
    decode(Array(line.utf8))
}

private func copied(_ command: Command, _ decoder: RequestDecoder) -> Decoded {
    switch command {
    case .ping: .ping
    case .count: .count
    case .stats: .stats
    case .flushall: .flushall
    case .quit: .quit
    case .get(let id): .get(Array(id))
    case .exists(let id): .exists(Array(id))
    case .del(let id): .del(Array(id))
    case .mget(let count): .mget((0..<count).map { Array(decoder.argument($0)) })
    case .set(let id, let name, let uri): .set(Array(id), Array(name), Array(uri))
    case .mset(let triples): .mset((0..<3 * triples).map { Array(decoder.argument($0)) })
    case .update(let id, let name, let uri): .update(Array(id), name: name.map { Array($0) }, portraitUri: uri.map { Array($0) })
    case .recent(let limit): .recent(limit)
    case .scan(let after, let limit): .scan(Array(after), limit)
    case .auth(let token): .auth(Array(token))
    }
}

/// The tokens of `line`, or the PARSE error's code.
func tokenize(_ line: [UInt8]) -> Result<[[UInt8]], ProtocolError> {
    Result { () throws(ProtocolError) in try LineTokenizer.tokens(of: line) }
}

func bytes(_ text: String) -> [UInt8] {
    Array(text.utf8)
}

/// `count` copies of `byte`.
func repeated(_ byte: Character, _ count: Int) -> [UInt8] {
    [UInt8](repeating: byte.asciiValue!, count: count)
}

/// The encoded form of `value`.
func encoded(_ value: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    ValueEncoder.append(value, to: &out)
    return out
}

/// Runs a pointer-based writer into a buffer with guard bytes after `count`, and
/// checks it wrote exactly `count` bytes and nothing past them.
func written(count: Int, _ write: (UnsafeMutableRawPointer) -> Int) -> (bytes: [UInt8], exact: Bool) {
    let guardBytes = 16
    var buffer = [UInt8](repeating: 0xEE, count: count + guardBytes)
    let n = buffer.withUnsafeMutableBytes { write($0.baseAddress!) }
    let untouched = buffer[count...].allSatisfy { $0 == 0xEE }
    return (Array(buffer[..<min(n, count)]), n == count && untouched)
}

