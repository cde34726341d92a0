@testable import ProfileProtocol
import Testing

/// The eight-bytes-at-a-time tests give the same answer as looking at each byte,
/// for every byte value at every position among fillers that do and don't have
/// the property.
@Test func wordTestsAgreeWithByteTests() {
    var disagreements: [UInt64] = []
    for filler: UInt8 in [0x41, 0x7E, 0x80, 0xFF, 0x21, 0x23] {
        for position in 0..<8 {
            for value in UInt8.min...UInt8.max {
                var bytes = [UInt8](repeating: filler, count: 8)
                bytes[position] = value
                let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                let checks = [
                    hasByte(below: 0x21, in: word) == bytes.contains { $0 < 0x21 },
                    hasByte(below: 0x80, in: word) == bytes.contains { $0 < 0x80 },
                    hasByte(0x22, in: word) == bytes.contains(0x22),
                    hasByte(0x5C, in: word) == bytes.contains(0x5C),
                    hasByte(0x7F, in: word) == bytes.contains(0x7F),
                    hasNonASCIIByte(in: word) == bytes.contains { $0 >= 0x80 },
                ]
                if checks.contains(false) {
                    disagreements.append(word)
                }
            }
        }
    }
    #expect(disagreements.isEmpty)
}

/// Counting a word's leading bytes in a range agrees with looking at each byte, wherever
/// the first byte outside the range is and whatever bytes follow it.
@Test func leadingByteCountsAgreeWithByteScans() {
    var disagreements: [UInt64] = []
    for limit: UInt8 in [0x21, 0x80] {
        for position in 0..<8 {
            for value in UInt8.min...UInt8.max {
                for later: UInt8 in [0x00, 0x20, limit, 0x7F, 0x80, 0xFF] {
                    var bytes = [UInt8](repeating: 0x7E, count: 8)
                    bytes[position] = value
                    for index in (position + 1)..<8 where index % 2 == 0 {
                        bytes[index] = later
                    }
                    let word = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
                    let expected = bytes.firstIndex { $0 < limit || $0 >= 0x80 } ?? 8
                    if leadingASCIIBytes(atLeast: limit, in: word) != expected {
                        disagreements.append(word)
                    }
                }
            }
        }
    }
    #expect(disagreements.isEmpty)
}
