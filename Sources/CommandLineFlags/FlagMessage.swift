/// Every sentence this module reports, so the three tools word them alike.
enum FlagMessage {
    static func needsValue(_ flag: Flag) -> String {
        "\(flag.spelling) needs a value"
    }

    static func needsValue(_ flag: Flag, notFlag next: String) -> String {
        "\(flag.spelling) needs a value, not the flag \(next) (write --\(flag.name)=VALUE for a value that starts with --)"
    }

    static func takesNoValue(_ flag: Flag) -> String {
        "\(flag.spelling) takes no value"
    }

    static func notWholeNumber(_ label: String, _ range: ClosedRange<Int>, _ text: String) -> String {
        "\(label) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'"
    }

    static func notDecimalNumber(_ label: String, _ range: ClosedRange<Double>, _ text: String) -> String {
        "\(label) takes a number from \(range.lowerBound) to \(range.upperBound), not '\(text)'"
    }
}
