import ProfileModel

/// The protocol's fixed limits: value sizes, list lengths, defaults. The sizes are every
/// front's (`ProfileLimits`).
///
/// Constants only; any thread may read them.
public enum Limits {
    /// Most bytes in a userId (after unescaping); an empty userId is an ARGS error instead.
    public static let userId = ProfileLimits.userId
    /// Most bytes in a display name (after unescaping).
    public static let name = ProfileLimits.name
    /// Most bytes in a portrait URI (after unescaping).
    public static let portraitUri = ProfileLimits.portraitUri
    /// Most ids in one MGET.
    public static let maxIds = ProfileLimits.idsPerRequest
    /// Most triples in one MSET.
    public static let maxTriples = ProfileLimits.idsPerRequest
    /// Default longest request line, counting every byte up to and including the LF.
    public static let defaultMaxLine = 65536
    /// RECENT's count when the request gives none.
    public static let recentDefault = 20
    /// SCAN's count when the request gives none.
    public static let scanDefault = 100
    /// Largest count RECENT and SCAN accept.
    public static let maxCount = ProfileLimits.rowsPerListing
    /// Most decimal digits in a number argument.
    public static let maxDigits = 9
}
