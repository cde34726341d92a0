import Glibc
import LineFront
import ProfileServer
import RESPFront
import ProfileStorePostgres

func fail(_ line: String, code: Int32) -> Never {
    var bytes = Array((line + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
    exit(code)
}

let parsed: Parsed
do {
    parsed = try parseArguments(Array(CommandLine.arguments.dropFirst()))
} catch {
    fail("profiled: \(error.message) (see 'profiled --help')", code: 64)
}

switch parsed {
case .help:
    print(usage)
case .version:
    print(version)
case .initSchema(let conninfo):
    do {
        let server = try PostgresProfileStore.prepareSchema(conninfo: conninfo)
        print("profiled: the profiled schema is ready in PostgreSQL at \(server)")
    } catch {
        fail("profiled: \(error.description)", code: 1)
    }
case .run(let configuration, let store, let logLevel):
    Log.level = logLevel
    let server: Server
    do {
        // A closure, not `store.open`: a partial application allocates a context that `exit` leaves behind.
        // The line protocol and RESP; the cache keeps VALUE lines, as most lookups are the line
        // protocol's GETs, which then copy them whole.
        let fronts = ServerFronts(line: LineProtocolFront(maxLine: configuration.maxLine),
                                  resp: RESPProtocolFront(keyPrefix: configuration.respKeyPrefix,
                                                          trackingTableMaxKeys: configuration.trackingTableMaxKeys),
                                  cacheEncoding: LineCacheEncoding())
        server = try Server(configuration: configuration, fronts: fronts, openStore: { try store.open() })
    } catch {
        Log.error("cannot start", ["error": error.description])
        exit(1)
    }
    // 2: stopped, with writes the store could not take left in the write log for the next start.
    exit(server.run() ? 0 : 2)
}
