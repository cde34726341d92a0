// swift-tools-version:6.0
import PackageDescription

// Dependencies point one way: C system libraries -> protocol / cache / store ->
// server -> executables. The middle modules do not import each other, and the
// CLI and the bench reach the server only through ProfileClient.
let optimize: [SwiftSetting] = [.unsafeFlags(["-Ounchecked"], .when(configuration: .release))]

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

        .target(name: "ProfileProtocol"),
        .target(name: "ProfileCache"),
        .target(name: "ProfileStore", dependencies: ["CSQLite"]),
        .target(name: "ProfileServer",
                dependencies: ["CLibevent", "ProfileProtocol", "ProfileCache", "ProfileStore"]),
        .target(name: "ProfileClient", dependencies: ["ProfileProtocol"]),
        // What profilectl and profilebench do, as libraries their tests can reach.
        .target(name: "ProfileAdmin", dependencies: ["ProfileClient", "ProfileStore", "ProfileProtocol"]),
        .target(name: "ProfileBench", dependencies: ["ProfileClient", "ProfileProtocol"]),

        .executableTarget(name: "profiled", dependencies: ["ProfileServer"]),
        .executableTarget(name: "profilectl", dependencies: ["ProfileAdmin"]),
        .executableTarget(name: "profilebench", dependencies: ["ProfileBench"]),

        .testTarget(name: "ProfileProtocolTests", dependencies: ["ProfileProtocol"]),
        .testTarget(name: "ProfileCacheTests", dependencies: ["ProfileCache"]),
        .testTarget(name: "ProfileStoreTests", dependencies: ["ProfileStore"]),
        .testTarget(name: "ProfileServerTests",
                    dependencies: ["ProfileServer", "ProfileClient", "ProfileProtocol"]),
        .testTarget(name: "ProfileClientTests", dependencies: ["ProfileClient"]),
        .testTarget(name: "ProfileAdminTests", dependencies: ["ProfileAdmin", "ProfileClient", "ProfileStore"]),
        .testTarget(name: "ProfileBenchTests", dependencies: ["ProfileBench", "ProfileClient"]),
    ],
    swiftLanguageModes: [.v6]
)
