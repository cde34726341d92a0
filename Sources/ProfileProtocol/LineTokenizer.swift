/// Splits a line into unescaped tokens with the request token rules; for clients
/// reading replies and for tests, where allocation is fine.
///
/// Stateless; any thread may use it.
public enum LineTokenizer {
    /// The tokens of `line`, which excludes its LF (and the CR before it, if any).
    ///
    /// - Throws: A PARSE error when the line breaks a token rule: bad quoting or
    ///   escape, a CR or LF, invalid UTF-8, NUL.
    public static func tokens(of line: some Collection<UInt8>) throws(ProtocolError) -> [[UInt8]] {
        var bytes = Array(line)
        let count = bytes.count
        // withUnsafeMutableBytes only rethrows untyped errors, so the outcome is carried out.
        let outcome = bytes.withUnsafeMutableBytes { buffer -> Result<[[UInt8]], ProtocolError> in
            guard let base = buffer.baseAddress else {
                return .success([])
            }
            var cursor = TokenCursor(base: base, count: count)
            var tokens: [[UInt8]] = []
            do throws(ProtocolError) {
                while let span = try cursor.next() {
                    tokens.append(Array(UnsafeRawBufferPointer(start: base + span.start, count: span.count)))
                }
            } catch {
                return .failure(error)
            }
            return .success(tokens)
        }
        return try outcome.get()
    }
}
