import CCRC32C
import ProfileStore

/// CRC-32C (Castagnoli), the checksum of the write log's frames: a torn or damaged frame at
/// the end of a segment is told from a whole one by it.
///
/// The CPU's CRC-32C instruction where there is one (SSE4.2: eight bytes per instruction, a
/// few times faster); otherwise slicing by eight, eight table lookups per eight bytes, about
/// 1 GB/s here. Stateless; any thread.
enum CRC32C {
    static let hardwareAvailable = profiled_crc32c_hardware_available() != 0

    /// The checksum of `bytes`, continued from `crc` (0 to start).
    static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard hardwareAvailable else { return checksumByTables(bytes, continuing: crc) }
        guard let base = bytes.baseAddress else { return crc }
        return ~profiled_crc32c_hardware(~crc, base, bytes.count)
    }

    /// `tables[k][b]`: the CRC of byte `b` followed by `k` zero bytes.
    private static let tables: [[UInt32]] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[0][byte] = crc
        }
        for byte in 0..<256 {
            for k in 1..<8 {
                let previous = tables[k - 1][byte]
                tables[k][byte] = (previous >> 8) ^ tables[0][Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// `checksum` without the CPU's instruction: the same value.
    static func checksumByTables(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        var crc = ~crc
        var offset = 0
        let count = bytes.count
        tables.withUnsafeBufferPointer { tables in
            let t0 = tables[0], t1 = tables[1], t2 = tables[2], t3 = tables[3]
            let t4 = tables[4], t5 = tables[5], t6 = tables[6], t7 = tables[7]
            while count - offset >= 8 {
                let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                    ^ UInt64(crc)
                crc = t7[Int(word & 0xFF)] ^ t6[Int((word >> 8) & 0xFF)]
                    ^ t5[Int((word >> 16) & 0xFF)] ^ t4[Int((word >> 24) & 0xFF)]
                    ^ t3[Int((word >> 32) & 0xFF)] ^ t2[Int((word >> 40) & 0xFF)]
                    ^ t1[Int((word >> 48) & 0xFF)] ^ t0[Int(word >> 56)]
                offset += 8
            }
            while offset < count {
                let byte = base.load(fromByteOffset: offset, as: UInt8.self)
                crc = (crc >> 8) ^ t0[Int((crc ^ UInt32(byte)) & 0xFF)]
                offset += 1
            }
        }
        return ~crc
    }
}
