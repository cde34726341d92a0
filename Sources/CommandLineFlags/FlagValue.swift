/// Numbers read from a flag's value, or from text that is named the same way (a config file's
/// key, an argument), with the message that names what was wrong.
///
/// Threading: stateless; any thread.
public enum FlagValue {
    /// `text` as a whole number in `range`.
    ///
    /// - Parameter label: What the message names: `--port`, a config key, an argument.
    public static func wholeNumber<Failure: Error>(_ text: String, in range: ClosedRange<Int>, for label: String,
                                                   error: (String) -> Failure) throws(Failure) -> Int {
        guard let number = Int(text), range.contains(number) else {
            throw error(FlagMessage.notWholeNumber(label, range, text))
        }
        return number
    }

    /// `text` as a decimal number in `range`.
    ///
    /// - Parameter label: What the message names: `--duration`, a config key, an argument.
    public static func decimalNumber<Failure: Error>(_ text: String, in range: ClosedRange<Double>, for label: String,
                                                     error: (String) -> Failure) throws(Failure) -> Double {
        guard let number = Double(text), range.contains(number) else {
            throw error(FlagMessage.notDecimalNumber(label, range, text))
        }
        return number
    }
}
