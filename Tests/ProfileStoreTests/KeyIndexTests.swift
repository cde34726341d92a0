import ProfileSystem
import Testing

/// The index both write paths number a commit's ids with.
@Suite struct KeyIndexTests {
    /// Keys that share prefixes, differ in length, and include the empty one, one after another.
    private let bytes: [UInt8]
    private let ranges: [Range<Int>]

    init() {
        let keys = [""] + (0..<1000).map { "u\($0)" } + (0..<50).map { "u\($0)x" }
        var bytes: [UInt8] = []
        var ranges: [Range<Int>] = []
        for key in keys {
            let start = bytes.count
            bytes.append(contentsOf: key.utf8)
            ranges.append(start..<bytes.count)
        }
        self.bytes = bytes
        self.ranges = ranges
    }

    /// Runs `body` with the key numbered `n` at `key(n)`, and every number.
    private func withKeys<R>(_ body: (_ key: (Int) -> UnsafeRawBufferPointer) -> R) -> R {
        bytes.withUnsafeBytes { raw in body { UnsafeRawBufferPointer(rebasing: raw[ranges[$0]]) } }
    }

    private func filled(_ key: (Int) -> UnsafeRawBufferPointer) -> KeyIndex {
        var index = KeyIndex()
        index.reset(forKeys: ranges.count)
        for number in ranges.indices {
            let position = index.find(key(number), keyOf: key)
            #expect(position.number == nil, "key \(number) found before it was set")
            index.set(position, to: number)
        }
        return index
    }

    @Test func everyKeySetIsFoundUnderItsNumberAndNoOther() {
        withKeys { key in
            let index = filled(key)
            for number in ranges.indices {
                #expect(index.find(key(number), keyOf: key).number == number, "key \(number)")
            }
            for absent in ["u1000", "x", "u1y", "u", "u0xx"] {
                let found = Array(absent.utf8).withUnsafeBytes { index.find($0, keyOf: key).number }
                #expect(found == nil, "\(absent)")
            }
        }
    }

    @Test func settingAHeldKeyAgainRenumbersIt() {
        withKeys { key in
            var index = filled(key)
            let position = index.find(key(7), keyOf: key)
            #expect(position.number == 7)
            index.set(position, to: 900)
            // Number 900 stands for key 7 now: the caller's bytes for it say so.
            let renumbered: (Int) -> UnsafeRawBufferPointer = { key($0 == 900 ? 7 : $0) }
            #expect(index.find(key(7), keyOf: renumbered).number == 900)
            #expect(index.find(key(8), keyOf: renumbered).number == 8)
        }
    }

    @Test func removingAllOrResettingForgetsEveryKey() {
        withKeys { key in
            var index = filled(key)
            index.removeAll()
            #expect(ranges.indices.allSatisfy { index.find(key($0), keyOf: key).number == nil })
            index = filled(key)
            index.reset(forKeys: 10)
            #expect(ranges.indices.allSatisfy { index.find(key($0), keyOf: key).number == nil })
            index = filled(key)
            index.reset(forKeys: ranges.count)
            #expect(ranges.indices.allSatisfy { index.find(key($0), keyOf: key).number == nil })
        }
    }
}
