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
exit(ProfileCtl.main(Array(CommandLine.arguments.dropFirst()), environment: environment))
