import ProfileStore
@testable import ProfileStoreSQLite
import ProfileTestSupport
import Testing

/// The write log's checksum: the CPU's instruction and the tables give the same values.
@Suite struct CRC32CTests {
    @Test func theCheckValueOfTheStandard() {
        let bytes = Array("123456789".utf8)
        #expect(bytes.withUnsafeBytes { CRC32C.checksum($0) } == 0xE306_9283)
        #expect(bytes.withUnsafeBytes { CRC32C.checksumByTables($0) } == 0xE306_9283)
    }

    @Test func theInstructionAndTheTablesAgreeOnEveryLengthAndContinuation() {
        #if arch(x86_64)
        #expect(CRC32C.hardwareAvailable, "every x86-64 CPU this runs on has SSE4.2")
        #endif
        var generator = SeededGenerator(seed: 32)
        for count in 0..<300 {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let split = count / 3
            bytes.withUnsafeBytes { all in
                let whole = CRC32C.checksumByTables(all)
                #expect(CRC32C.checksum(all) == whole)
                let head = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[0..<split]))
                #expect(CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[split...]), continuing: head) == whole)
            }
        }
    }
}
