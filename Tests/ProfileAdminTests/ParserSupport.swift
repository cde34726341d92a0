import ProfileTestSupport
import ProfileAdmin
import Testing

/// What a parser reported, in a form tests compare.
enum Parsed: Equatable, CustomStringConvertible {
    case row(Int, [UInt8], [UInt8], [UInt8])
    case bad(Int, String)

    static func row(_ line: Int, _ userId: String, _ name: String, _ portraitUri: String) -> Parsed {
        .row(line, Array(userId.utf8), Array(name.utf8), Array(portraitUri.utf8))
    }

    var description: String {
        switch self {
        case .row(let line, let id, let name, let uri):
            "row(\(line), \(String(decoding: id, as: UTF8.self)), \(String(decoding: name, as: UTF8.self).debugDescription), \(String(decoding: uri, as: UTF8.self)))"
        case .bad(let line, let reason): "bad(\(line), \(reason))"
        }
    }
}

/// Chunk sizes that cut every token, line break and UTF-8 sequence somewhere.
let chunkSizes = [1, 2, 3, 5, 7, 16, 1 << 18]

/// Everything `format` reports for `bytes`, read `chunkSize` bytes at a time.
func parseAll(_ bytes: [UInt8], _ format: FileFormat, chunkSize: Int) throws -> [Parsed] {
    let parser = format.parser(MemoryInput(bytes, chunkSize: chunkSize))
    var result: [Parsed] = []
    while true {
        switch try parser.next() {
        case .end:
            #expect(parser.bytesConsumed == bytes.count)
            return result
        case .bad(let line, let reason):
            result.append(.bad(line, reason))
        case .row(let line):
            let v = parser.values
            result.append(.row(line, Array(v.userId), Array(v.name), Array(v.portraitUri)))
        }
    }
}

/// Parses at every chunk size and checks they all agree; returns the result.
func parseEverywhere(_ bytes: [UInt8], _ format: FileFormat) throws -> [Parsed] {
    let reference = try parseAll(bytes, format, chunkSize: 1 << 18)
    for size in chunkSizes {
        #expect(try parseAll(bytes, format, chunkSize: size) == reference, "chunk size \(size)")
    }
    return reference
}

func parseEverywhere(_ text: String, _ format: FileFormat) throws -> [Parsed] {
    try parseEverywhere(Array(text.utf8), format)
}
