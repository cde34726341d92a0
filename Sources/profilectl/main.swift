import Glibc
import ProfileAdmin

var environment: [String: String] = [:]
var entry = environ
while let pointer = entry.pointee {
    let text = String(cString: pointer)
    if let eq = text.firstIndex(of: "=") {
        environment[String(text[..<eq])] = String(text[text.index(after: eq)...])
    }
    entry += 1
}
// The bytes as given: CommandLine.arguments would turn invalid UTF-8 into U+FFFD unseen.
let arguments = (1..<Int(CommandLine.argc)).map { index in
    let argument = CommandLine.unsafeArgv[index]!
    return Array(UnsafeRawBufferPointer(start: argument, count: strlen(argument)))
}
exit(ProfileCtl.main(arguments, environment: environment))
