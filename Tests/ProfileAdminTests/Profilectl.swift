import ProfileTestSupport
import Glibc
import Testing

/// What a profilectl run printed and how it exited.
struct Run {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs the built profilectl to completion with `stdin` from a file (or /dev/null).
func profilectl(_ args: [String], stdinPath: String = "/dev/null") throws -> Run {
    try profilectl(rawArgs: args.map { Array($0.utf8) }, stdinPath: stdinPath)
}

/// `profilectl` with arguments as bytes, which need not be valid UTF-8.
func profilectl(rawArgs: [[UInt8]], stdinPath: String = "/dev/null") throws -> Run {
    let directory = try makeTemporaryDirectory()
    defer { removeDirectory(directory) }
    let out = directory + "/stdout"
    let err = directory + "/stderr"
    let pid = try spawn(executable("profilectl"), rawArgs: rawArgs, stderrPath: err, stdoutPath: out,
                        stdinPath: stdinPath)
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return Run(status: exitCode(status), stdout: readText(out), stderr: readText(err))
}

extension TestServer {
    /// The flags that reach this server.
    var flags: [String] { ["--port", String(port)] }
}

/// Writes `text` to a new file in `directory` and returns its path.
func file(_ directory: String, _ name: String, _ text: String) -> String {
    let path = directory + "/" + name
    writeText(path, text)
    return path
}

/// A CSV of `count` generated profiles.
func generatedCSV(_ count: Int, from first: Int = 0) -> String {
    var text = "userId,name,portraitUri\n"
    for i in first..<first + count {
        text += "u\(i),Name \(i),https://cdn.example/p/\(i).png\n"
    }
    return text
}

/// Awkward values: quotes, commas, line breaks, tabs, CR, backslashes, emoji, Chinese.
let awkwardCSV = """
    userId,name,portraitUri
    "q""1","Fran ""The Man"" Li",https://cdn.example/p/1.png
    c2,"Li, Fran","https://x/?a=1,b=2"
    n3,"two
    lines",u3
    t4,"tab\there",u4
    e5,😀 Emoji 🎉,https://cdn.example/😀.png
    z6,小明,https://例子.cn/头像.png
    b7,"back\\slash ""and"" cr\r",""

    """
