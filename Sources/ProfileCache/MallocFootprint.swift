import Glibc

/// What a malloc'd block really occupies: its usable size plus the allocator's
/// size word in front of it.
///
/// `malloc_usable_size` lives in `<malloc.h>`, which the Glibc module does not
/// export, so it is looked up once by name. Any thread may call it.
enum MallocFootprint {
    private typealias UsableSize = @convention(c) (UnsafeMutableRawPointer?) -> Int

    private static let usableSize: UsableSize = {
        // A null handle is RTLD_DEFAULT: search the process's global symbols,
        // which also finds a replacement allocator's version if one is preloaded.
        guard let symbol = dlsym(nil, "malloc_usable_size") else {
            fatalError("the C library has no malloc_usable_size")
        }
        return unsafeBitCast(symbol, to: UsableSize.self)
    }()

    static func of(_ block: UnsafeMutableRawPointer) -> Int {
        usableSize(block) + MemoryLayout<Int>.size
    }

    /// A forecast for a block not yet allocated, used to decide whether growing fits.
    static func estimate(byteCount: Int) -> Int {
        byteCount + MemoryLayout<Int>.size
    }
}
