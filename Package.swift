// swift-tools-version:6.0
import PackageDescription

// Dependencies point one way: C system libraries -> codecs / cache / store interface ->
// server (the core, which names no codec and no store) -> fronts (a codec and its sessions) and
// store implementations -> executables, which register the fronts and choose the store. The CLI reaches the server through ProfileClient; the bench opens
// its connections with ProfileClient and writes its pipelined requests itself, the same way
// for profiled, memcached and Redis.
// The request path keeps its state in class properties; release builds skip the dynamic
// exclusivity checks on them (about 5% of a request's instructions). Overflow and bounds
// checks stay on.
let hotPath: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)),
                                // The fronts are modules of their own over the core's request
                                // path, whose small functions must inline into them as they did
                                // when they were one module: a cached GET took 1,346
                                // instructions without this, 1,158 with it, 1,058 once the
                                // hottest few were also public and @inlinable (a `package`
                                // function's body does not inline across modules), 1,050 as one.
                                .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))]

let package = Package(
    name: "profiled",
    products: [
        .executable(name: "profiled", targets: ["profiled"]),
        .executable(name: "profilectl", targets: ["profilectl"]),
        .executable(name: "profilebench", targets: ["profilebench"]),
        .library(name: "ProfileClient", targets: ["ProfileClient"]),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLibevent", pkgConfig: "libevent_core",
                       providers: [.apt(["libevent-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        // One inline function: the CPU's prefetch, which Swift does not expose.
        .systemLibrary(name: "CPrefetch"),
        .systemLibrary(name: "CCRC32C"),
        // Linux calls and constants the Glibc module leaves out (thread priority and names, accept4).
        .systemLibrary(name: "CLinux"),

        // A Unix socket's address, for the server's listener and the client's connections.
        .target(name: "UnixSocketAddress"),

        // Threads, locks and the clock, for the modules that run threads of their own.
        .target(name: "ProfileSystem", dependencies: ["CLinux"]),
        // How the three executables read `--flag value`: one set of rules and messages.
        .target(name: "CommandLineFlags"),

        // Byte copies, decimal numbers and comparisons both wire formats write with.
        .target(name: "WireBytes", swiftSettings: hotPath),
        // What a profile is on every front: its fields, their limits, and the roles that may touch it.
        .target(name: "ProfileModel", dependencies: ["WireBytes"], swiftSettings: hotPath),
        // The line protocol's codec.
        .target(name: "ProfileProtocol", dependencies: ["ProfileModel", "WireBytes"], swiftSettings: hotPath),
        // The RESP front's codec, a sibling of ProfileProtocol: the same request path, another wire format.
        .target(name: "RESPProtocol", dependencies: ["ProfileModel", "WireBytes"], swiftSettings: hotPath),
        .target(name: "ProfileCache", dependencies: ["CPrefetch", "ProfileSystem"], swiftSettings: hotPath),
        // What the server knows of a store: reads, the write path, shared stores, errors.
        .target(name: "ProfileStore"),
        // The store file: SQLite in the cache directory, with its write log and merger.
        .target(name: "ProfileStoreSQLite",
                dependencies: ["CSQLite", "CLinux", "CPrefetch", "CCRC32C", "ProfileStore", "ProfileSystem", "WireBytes"],
                swiftSettings: hotPath),
        // TLS over a connected socket, for the server's listeners and the clients: OpenSSL's
        // contexts and sessions, owned and freed here.
        .target(name: "ProfileTLS", dependencies: ["COpenSSL"]),
        // One libpq connection with a deadline on every call, for stores shared by several nodes.
        .target(name: "ProfilePostgres", dependencies: ["CPostgres", "ProfileSystem"]),
        // The shared store: profiles in a PostgreSQL database several servers use at once.
        .target(name: "ProfileStorePostgres", dependencies: ["ProfilePostgres", "ProfileStore", "ProfileSystem"]),
        .target(name: "ProfileServer",
                dependencies: ["CLibevent", "CLinux", "ProfileSystem", "ProfileModel", "ProfileCache", "ProfileStore",
                               "ProfileTLS", "UnixSocketAddress", "WireBytes"],
                swiftSettings: hotPath),
        // The line protocol's front: its codec's requests served through the core, and its sessions.
        .target(name: "LineFront",
                dependencies: ["CLibevent", "ProfileServer", "ProfileProtocol", "ProfileModel", "ProfileCache", "ProfileStore", "WireBytes"],
                swiftSettings: hotPath),
        // RESP's front: profiles as Redis hashes, transactions, client-side caching.
        .target(name: "RESPFront",
                dependencies: ["CLibevent", "ProfileServer", "RESPProtocol", "ProfileModel", "ProfileCache", "ProfileStore",
                               "ProfileSystem", "WireBytes"],
                swiftSettings: hotPath),
        .target(name: "ProfileClient", dependencies: ["ProfileProtocol", "ProfileTLS", "UnixSocketAddress"]),
        // What profilectl and profilebench do, as libraries their tests can reach.
        .target(name: "ProfileAdmin",
                dependencies: ["CommandLineFlags", "ProfileClient", "ProfileStore", "ProfileStoreSQLite", "ProfileProtocol", "WireBytes"],
                swiftSettings: hotPath),
        .target(name: "ProfileBench", dependencies: ["CommandLineFlags", "ProfileClient", "ProfileProtocol", "ProfileTLS"]),

        .executableTarget(name: "profiled",
                          dependencies: ["CommandLineFlags", "ProfileServer", "LineFront", "RESPFront", "ProfileStore", "ProfileStoreSQLite",
                                         "ProfileStorePostgres", "ProfileTLS"]),
        .executableTarget(name: "profilectl", dependencies: ["ProfileAdmin"]),
        .executableTarget(name: "profilebench", dependencies: ["ProfileBench"]),

        // Starting the built executables and talking to them, shared by the black-box tests.
        .target(name: "ProfileTestSupport", dependencies: ["ProfileClient"], path: "Tests/ProfileTestSupport"),
        .testTarget(name: "CommandLineFlagsTests", dependencies: ["CommandLineFlags"]),
        .testTarget(name: "ProfileProtocolTests", dependencies: ["ProfileModel", "ProfileProtocol", "ProfileTestSupport", "WireBytes"]),
        .testTarget(name: "RESPProtocolTests", dependencies: ["RESPProtocol", "ProfileModel"]),
        .testTarget(name: "ProfileCacheTests", dependencies: ["ProfileCache", "ProfileSystem", "ProfileTestSupport"]),
        .testTarget(name: "ProfileStoreTests", dependencies: ["ProfileStore", "ProfileStoreSQLite", "ProfileSystem", "CSQLite", "ProfileTestSupport"]),
        // Against the throw-away PostgreSQL that Scripts/test starts (PROFILED_TEST_POSTGRES).
        .testTarget(name: "ProfilePostgresTests", dependencies: ["ProfilePostgres", "ProfileSystem", "ProfileTestSupport"]),
        .testTarget(name: "ProfileServerTests",
                    dependencies: ["ProfileServer", "LineFront", "RESPFront", "ProfileCache", "ProfileClient", "ProfileProtocol", "ProfileStore",
                                   "ProfileStoreSQLite",
                                   "ProfileSystem", "ProfileTLS", "CSQLite",
                                   "ProfileTestSupport"]),
        .testTarget(name: "ProfileClientTests", dependencies: ["ProfileClient"]),
        .testTarget(name: "ProfileAdminTests",
                    dependencies: ["ProfileAdmin", "ProfileClient", "ProfileStore", "ProfileStoreSQLite", "ProfileTestSupport"]),
        .testTarget(name: "ProfileBenchTests", dependencies: ["ProfileBench", "ProfileClient", "ProfileTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
