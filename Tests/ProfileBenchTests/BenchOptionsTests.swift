import ProfileTestSupport
import Testing
@testable import ProfileBench
import ProfileClient

@Suite("Command line")
struct BenchOptionsTests {
    func options(_ arguments: [String]) throws -> BenchOptions {
        guard case .run(let options) = try BenchOptions.parse(arguments) else { throw UsageError("not a run") }
        return options
    }

    @Test func defaultsDriveProfiledOnLoopback() throws {
        let o = try options([])
        #expect(o.target == .profiled)
        #expect(o.endpointDescription == "profiled://127.0.0.1:7711")
        #expect(o.connections == 50 && o.pipeline == 1 && o.threads == 1)
        #expect(o.mix == OperationMix([(.get, 100)]))
        #expect(o.rate == nil && o.requests == nil && !o.preload && !o.warm && !o.json)
    }

    @Test func everyFlagIsRead() throws {
        let o = try options(["--host", "localhost", "--port=7800", "--token", "t", "--conns", "8", "--pipeline", "16",
                             "--threads", "2", "--requests", "1000", "--keys", "500", "--dist", "zipf:1.2",
                             "--mix", "get=90,set=10", "--mget-size", "4", "--miss-ratio", "0.25", "--preload", "--warm",
                             "--rate", "5000", "--value-size", "64", "--seed", "9", "--json"])
        #expect(o.endpointDescription == "profiled://localhost:7800")
        #expect(o.token == "t" && o.connections == 8 && o.pipeline == 16 && o.threads == 2)
        #expect(o.requests == 1000 && o.keys == 500 && o.distribution == .zipf(exponent: 1.2))
        #expect(o.mix == OperationMix([(.get, 90), (.set, 10)]))
        #expect(o.mgetSize == 4 && o.missRatio == 0.25 && o.preload && o.warm && o.rate == 5000)
        #expect(o.valueSize == 64 && o.seed == 9 && o.json)
        #expect(try options(["--dist", "zipf"]).distribution == .zipf(exponent: 0.99))
        #expect(try options(["--unix", "/run/p.sock"]).endpointDescription == "profiled://unix:/run/p.sock")
        let tls = try options(["--tls", "--cacert", "ca.crt", "--cert", "c.crt", "--key", "c.key", "--sni", "db", "--insecure"]).tls
        #expect(tls == TLSClientOptions(caCertificateFile: "ca.crt", certificateFile: "c.crt", keyFile: "c.key", serverName: "db",
                                        verifyPeer: false))
        #expect(try options(["--tls"]).tls == TLSClientOptions())
        #expect(try options([]).tls == nil)
    }

    @Test func targetsNameProtocolAndAddress() throws {
        let memcached = try options(["--target", "memcached://127.0.0.1:11311"])
        #expect(memcached.target == .memcached && memcached.port == 11311)
        let redis = try options(["--target", "redis"])
        #expect(redis.endpointDescription == "redis://127.0.0.1:6379")
        // A bare protocol names no address, so --host and --port still choose it.
        #expect(try options(["--target", "memcached", "--port", "11311"]).endpointDescription == "memcached://127.0.0.1:11311")
        let resp = try options(["--target", "resp://127.0.0.1:6380", "--token", "t",
                                "--mix", "get=5,hmget=1,set=1,update=1,del=1,exists=1"])
        #expect(resp.target == .resp && resp.port == 6380 && resp.token == "t")
        #expect(resp.endpointDescription == "resp://127.0.0.1:6380")
        #expect(resp.mix.weights.map(\.operation) == [.get, .hmget, .set, .update, .del, .exists])
        #expect(try options(["--target", "resp"]).endpointDescription == "resp://127.0.0.1:6379")
    }

    @Test(arguments: [
        (["--frob"], "unknown option '--frob'"),
        (["--conns"], "--conns needs a value"),
        (["--unix", "--json"], "--unix needs a value, not the flag --json (write --unix=VALUE for a value that starts with --)"),
        (["--conns", "0"], "--conns takes a whole number from 1 to 10000, not '0'"),
        (["--miss-ratio", "2"], "--miss-ratio takes a number from 0.0 to 1.0, not '2'"),
        (["--dist", "normal"], "--dist takes uniform, zipf or zipf:s with 0 < s <= 10, not 'normal'"),
        (["--target", "http://x:1"],
         "--target: 'http://x:1' is not profiled://HOST:PORT, memcached://HOST:PORT, redis://HOST:PORT or resp://HOST:PORT"),
        (["--target", "resp://:6379"], "--target: 'resp://:6379' needs HOST:PORT after resp://"),
        (["--target", "redis://nohost"], "--target: 'redis://nohost' needs HOST:PORT after redis://"),
        (["--target", "memcached", "--mix", "get=1,exists=1"], "--mix: memcached has no exists"),
        (["--target", "redis", "--mix", "update=1"], "--mix: redis has no update"),
        (["--target", "redis", "--mix", "get=9,count=1"], "--mix: redis has no count"),
        (["--target", "resp", "--mix", "get=9,mget=1"],
         "--mix: resp has no mget, since no command reads several hashes (hmget reads both fields of one)"),
        (["--target", "resp", "--mix", "get=9,scan=1"], "--mix: resp has no scan"),
        (["--target", "redis", "--mix", "hmget=1"],
         "--mix: redis has no hmget, since it stores each profile as one string (resp:// reads hashes)"),
        (["--mix", "get=9,hmget=1"], "--mix: profiled has no hmget"),
        (["--target", "memcached", "--mix", "hmget=1"], "--mix: memcached has no hmget"),
        (["--target", "memcached", "--token", "x"], "--token: memcached's text protocol has no AUTH"),
        (["--threads", "4", "--conns", "2"], "--threads 4 needs at least as many --conns"),
        (["--preload=yes"], "--preload takes no value"),
        (["--mix", "get=1,get=1"], "--mix: get is listed twice"),
        (["--requests", "10", "--duration", "1"], "--duration and --requests both say when the run ends: give one"),
        (["--unix", "/run/p.sock", "--port", "7711"], "--unix connects to a socket, so --port has no use with it"),
        (["--host", "::1", "--unix", "/run/p.sock"], "--unix connects to a socket, so --host has no use with it"),
        (["--target", "redis://h:1", "--host", "h"], "--target redis://h:1 names the address, so --host has no use with it"),
        (["--unix=/run/p.sock", "--target", "profiled://h:1"],
         "--target profiled://h:1 names the address, so --unix has no use with it"),
        (["--cacert", "ca.crt"], "--cacert sets up TLS: add --tls"),
        (["--insecure"], "--insecure sets up TLS: add --tls"),
        (["--tls=yes"], "--tls takes no value"),
        (["--tls", "--unix", "/run/p.sock"], "--unix connects to a socket, so --tls has no use with it"),
        (["--tls", "--cert", "c.crt"], "a client certificate needs both --cert and --key"),
        (["--tls", "--key", "c.key"], "a client certificate needs both --cert and --key"),
        (["--tls", "--target", "memcached"], "--tls: only profiled, redis and resp targets are measured over TLS"),
    ])
    func badCommandLinesSayWhatIsWrong(arguments: [String], message: String) {
        #expect(throws: UsageError(message)) { try BenchOptions.parse(arguments) }
    }

    @Test func theExecutableSaysOneSentenceAndExits64() throws {
        let (status, output) = try runToCompletion(executable("profilebench"), ["--conns", "0"])
        #expect(status == 64)
        #expect(output == "profilebench: --conns takes a whole number from 1 to 10000, not '0' (see 'profilebench --help')\n")
    }

    @Test func theExecutableRefusesAnOperationTheTargetLacksBeforeConnecting() throws {
        // Nothing listens on this port: a refusal must come from the command line, not a connect.
        let (status, output) = try runToCompletion(executable("profilebench"),
                                                   ["--target", "resp://127.0.0.1:\(try unusedPort())", "--mix", "get=90,mget=10"])
        #expect(status == 64)
        #expect(output == "profilebench: --mix: resp has no mget, since no command reads several hashes "
                + "(hmget reads both fields of one) (see 'profilebench --help')\n")
    }
}

@Suite("Requests")
struct RequestWriterTests {
    func written(_ target: TargetProtocol, _ build: (RequestWriter, ByteBuffer) -> Void) -> String {
        let writer = RequestWriter(target: target, space: KeySpace(keys: 1000, valueSize: 10), token: Array("s3cret".utf8))
        let out = ByteBuffer(capacity: 8)
        build(writer, out)
        return String(decoding: out.readable, as: UTF8.self)
    }

    @Test func idsAndValuesHaveTheirSizes() {
        let space = KeySpace(keys: 1000, valueSize: 100)
        #expect(space.id(7) == "u00000007")
        #expect(space.id(999, missing: true) == "x00000999")
        #expect(space.name.count + space.portraitUri.count == 100)
        #expect(space.value.count == 100)
        #expect(KeySpace(keys: 1_000_000_000, valueSize: 2).id(999_999_999) == "u999999999")
    }

    @Test func profiledRequests() {
        #expect(written(.profiled) { $0.lookup(7, missing: false, to: $1) } == "GET u00000007\n")
        #expect(written(.profiled) { w, out in
            w.beginMultiLookup(count: 2, to: out)
            w.multiLookupKey(1, missing: false, to: out)
            w.multiLookupKey(2, missing: true, to: out)
            w.endMultiLookup(to: out)
        } == "MGET u00000001 x00000002\n")
        #expect(written(.profiled) { $0.set(3, to: $1) } == "SET u00000003 Na https://\n")
        #expect(written(.profiled) { $0.batchSet(1..<3, to: $1) } == "MSET u00000001 Na https:// u00000002 Na https://\n")
        #expect(written(.profiled) { $0.update(3, missing: false, to: $1) } == "UPDATE u00000003 name Na\n")
        #expect(written(.profiled) { $0.delete(3, missing: false, to: $1) } == "DEL u00000003\n")
        #expect(written(.profiled) { $0.exists(3, missing: true, to: $1) } == "EXISTS x00000003\n")
        #expect(written(.profiled) { $0.auth(to: $1) } == "AUTH s3cret\n")
    }

    @Test func memcachedRequests() {
        #expect(written(.memcached) { $0.lookup(7, missing: false, to: $1) } == "get u00000007\r\n")
        #expect(written(.memcached) { w, out in
            w.beginMultiLookup(count: 2, to: out)
            w.multiLookupKey(1, missing: false, to: out)
            w.multiLookupKey(2, missing: false, to: out)
            w.endMultiLookup(to: out)
        } == "get u00000001 u00000002\r\n")
        #expect(written(.memcached) { $0.set(3, to: $1) } == "set u00000003 0 0 10\r\nNahttps://\r\n")
        #expect(written(.memcached) { $0.delete(3, missing: false, to: $1) } == "delete u00000003\r\n")
    }

    @Test func redisRequests() {
        #expect(written(.redis) { $0.lookup(7, missing: false, to: $1) } == "*2\r\n$3\r\nGET\r\n$9\r\nu00000007\r\n")
        #expect(written(.redis) { w, out in
            w.beginMultiLookup(count: 2, to: out)
            w.multiLookupKey(1, missing: false, to: out)
            w.multiLookupKey(2, missing: false, to: out)
            w.endMultiLookup(to: out)
        } == "*3\r\n$4\r\nMGET\r\n$9\r\nu00000001\r\n$9\r\nu00000002\r\n")
        #expect(written(.redis) { $0.set(3, to: $1) } == "*3\r\n$3\r\nSET\r\n$9\r\nu00000003\r\n$10\r\nNahttps://\r\n")
        #expect(written(.redis) { $0.batchSet(1..<2, to: $1) } == "*3\r\n$4\r\nMSET\r\n$9\r\nu00000001\r\n$10\r\nNahttps://\r\n")
        #expect(written(.redis) { $0.auth(to: $1) } == "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n")
        #expect(written(.redis) { $0.warmingRead(1..<3, to: $1) } == "*3\r\n$4\r\nMGET\r\n$9\r\nu00000001\r\n$9\r\nu00000002\r\n")
    }

    @Test func respRequestsAreHashCommands() {
        #expect(written(.resp) { $0.lookup(7, missing: false, to: $1) } == "*2\r\n$7\r\nHGETALL\r\n$9\r\nu00000007\r\n")
        #expect(written(.resp) { $0.lookupFields(7, missing: true, to: $1) }
                == "*4\r\n$5\r\nHMGET\r\n$9\r\nx00000007\r\n$4\r\nname\r\n$11\r\nportraitUri\r\n")
        let hset3 = "*6\r\n$4\r\nHSET\r\n$9\r\nu00000003\r\n$4\r\nname\r\n$2\r\nNa\r\n$11\r\nportraitUri\r\n$8\r\nhttps://\r\n"
        #expect(written(.resp) { $0.set(3, to: $1) } == hset3)
        #expect(written(.resp) { $0.batchSet(3..<4, to: $1) } == hset3)
        #expect(written(.resp) { $0.update(3, missing: false, to: $1) }
                == "*4\r\n$4\r\nHSET\r\n$9\r\nu00000003\r\n$4\r\nname\r\n$2\r\nNa\r\n")
        #expect(written(.resp) { $0.delete(3, missing: false, to: $1) } == "*2\r\n$3\r\nDEL\r\n$9\r\nu00000003\r\n")
        #expect(written(.resp) { $0.exists(3, missing: true, to: $1) } == "*2\r\n$6\r\nEXISTS\r\n$9\r\nx00000003\r\n")
        #expect(written(.resp) { $0.warmingRead(5..<6, to: $1) } == "*2\r\n$7\r\nHGETALL\r\n$9\r\nu00000005\r\n")
        #expect(written(.resp) { $0.auth(to: $1) } == "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n")
    }

    @Test func respPreloadsAndWarmsOneHashPerRequest() {
        let space = KeySpace(keys: 1000, valueSize: 100)
        let resp = RequestWriter(target: .resp, space: space, token: nil)
        #expect(resp.preloadBatch == 1 && resp.warmBatch == 1)
        #expect(LoadTest.preloadPipeline(.resp) == 32)
        let redis = RequestWriter(target: .redis, space: space, token: nil)
        #expect(redis.preloadBatch > 1 && redis.warmBatch > 1)
    }
}
