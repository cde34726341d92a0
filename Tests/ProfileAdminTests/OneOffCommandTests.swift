import ProfileTestSupport
import Glibc
import Testing

@Suite struct OneOffCommandTests {
    @Test func commandsPrintForPeopleAndForScripts() throws {
        let server = try TestServer()
        let f = server.flags
        #expect(try profilectl(["set", "42", "Fran Li", "https://cdn.example/p/42.png"] + f).stdout == "stored\n")
        var run = try profilectl(["get", "42", "7"] + f)
        #expect(run.status == 1)
        #expect(run.stdout == "42  Fran Li  https://cdn.example/p/42.png\n7  not found\n")
        run = try profilectl(["get", "42", "--json"] + f)
        #expect(run.stdout == #"[{"userId":"42","name":"Fran Li","portraitUri":"https://cdn.example/p/42.png"}]"# + "\n")
        #expect(try profilectl(["update", "42", "--name", "小明"] + f).stdout == "updated\n")
        #expect(try profilectl(["update", "7", "--name", "x", "--json"] + f).stdout == "{\"updated\":false}\n")
        #expect(try profilectl(["exists", "42"] + f).status == 0)
        #expect(try profilectl(["exists", "7", "--json"] + f).stdout == "{\"exists\":false}\n")
        #expect(try profilectl(["count", "--json"] + f).stdout == "{\"count\":1}\n")
        #expect(try profilectl(["recent", "--json"] + f).stdout.contains("小明"))
        #expect(try profilectl(["scan", "--after", "", "--limit", "5"] + f).stdout
            == "42  小明  https://cdn.example/p/42.png\n")
        #expect(try profilectl(["ping"] + f).stdout == "PONG\n")
        #expect(try profilectl(["stats", "--json"] + f).stdout.contains("\"store_rows\":1"))
        #expect(try profilectl(["del", "42"] + f).stdout == "deleted\n")
        #expect(try profilectl(["del", "42"] + f).status == 1)
    }

    /// Where no server listens, a command says so, over TCP and over a Unix socket path.
    @Test func noServerListeningIsSaidPlainly() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // A port just freed: nothing listens on it.
        let server = try TestServer()
        let port = server.port
        _ = server.stop()
        for place in [["--port", "\(port)"], ["--unix", directory + "/none.sock"]] {
            let run = try profilectl(["ping"] + place)
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains("no server is listening there"), "\(run.stderr)")
        }
    }

    @Test func serverErrorsShowTheirCode() throws {
        let server = try TestServer()
        let run = try profilectl(["set", String(repeating: "i", count: 129), "n", "u"] + server.flags)
        #expect(run.status == 1)
        #expect(run.stderr.hasPrefix("profilectl: ERROR TOOLARGE userId"))
    }

    @Test func argumentsThatAreNotUTF8AreRefusedNotStoredWithReplacements() throws {
        let server = try TestServer()
        let f = server.flags.map { Array($0.utf8) }
        let cut: [UInt8] = Array("a".utf8) + [0xC3]
        for (args, what) in [([bytes("set"), bytes("y"), cut, bytes("u")], "argument 2 (NAME)"),
                             ([bytes("set"), bytes("y"), bytes("n"), cut], "argument 3 (URI)"),
                             ([bytes("get"), bytes("a"), bytes("b"), cut], "argument 3 (ID)"),
                             ([bytes("update"), bytes("y"), bytes("--name"), cut], "the value of --name"),
                             ([bytes("update"), bytes("y"), bytes("--portrait-uri=") + cut], "the value of --portrait-uri")] {
            let run = try profilectl(rawArgs: args + f)
            #expect(run.status == 64, "\(what): \(run.stderr)")
            #expect(run.stderr.hasPrefix("profilectl: \(what) is not valid UTF-8; usage: "), "\(run.stderr)")
            #expect(run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        }
        #expect(try server.connect().count() == 0)
        // Valid UTF-8 beyond ASCII goes through as it is.
        #expect(try profilectl(rawArgs: [bytes("set"), bytes("y"), bytes("小明"), bytes("u")] + f).status == 0)
        #expect(try server.connect().get(bytes("y"))?.name == bytes("小明"))
    }

    @Test func flushallNeedsYesWhenStdinIsNotATerminal() throws {
        let server = try TestServer()
        try server.connect().set(.init(userId: "a", name: "b", portraitUri: "c"))
        var run = try profilectl(["flushall"] + server.flags)
        #expect(run.status == 64)
        #expect(run.stderr.contains("pass --yes"))
        #expect(try server.connect().count() == 1)
        run = try profilectl(["flushall", "--yes"] + server.flags)
        #expect(run.status == 0)
        #expect(try server.connect().count() == 0)
    }

    @Test(arguments: [("n\n", 1, 1), ("y\n", 0, 0)])
    func flushallAsksOnATerminal(answer: String, status: Int32, left: Int) throws {
        let server = try TestServer()
        try server.connect().set(.init(userId: "a", name: "b", portraitUri: "c"))
        let (master, terminal) = try openPseudoTerminal()
        defer { close(master) }
        // Typed ahead: the terminal holds the answer until profilectl reads it.
        _ = answer.withCString { write(master, $0, strlen($0)) }
        let run = try profilectl(["flushall"] + server.flags, stdinPath: terminal)
        #expect(run.status == status, "\(run.stderr)")
        #expect(run.stderr.contains("Delete every profile on 127.0.0.1:\(server.port)? [y/N]"))
        #expect(try server.connect().count() == left)
    }
}

/// A new pseudo-terminal: the master's descriptor and the path of its terminal side.
func openPseudoTerminal() throws -> (Int32, String) {
    let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
    guard master >= 0 else { throw TestFailure("cannot open /dev/ptmx") }
    // Linux's _IOW('T', 0x31, int) and _IOR('T', 0x30, unsigned int); the macros do not import.
    let setLock: UInt = 0x4004_5431
    let getNumber: UInt = 0x8004_5430
    var unlock: Int32 = 0
    var number: UInt32 = 0
    guard ioctl(master, setLock, &unlock) == 0, ioctl(master, getNumber, &number) == 0 else {
        close(master)
        throw TestFailure("cannot set up a pseudo-terminal")
    }
    return (master, "/dev/pts/\(number)")
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
