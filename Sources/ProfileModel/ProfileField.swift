import WireBytes

/// The sizes a profile's parts may have, the same on every front (docs/PROTOCOL.md's limits).
///
/// Constants only; any thread may read them.
public enum ProfileLimits {
    /// Most bytes in a userId; an empty userId is no userId.
    public static let userId = 128
    /// Most bytes in a display name.
    public static let name = 256
    /// Most bytes in a portrait URI.
    public static let portraitUri = 2048
    /// Most ids (or keys, or fields) one request may name.
    public static let idsPerRequest = 1000
    /// Most rows one listing (RECENT, SCAN) returns.
    public static let rowsPerListing = 1000
}

/// One of a profile's two fields, by its name on the wire (exact case).
///
/// A plain value; any thread may use it.
public enum ProfileField: CaseIterable, Sendable {
    case name
    case portraitUri

    public init?(_ bytes: UnsafeRawBufferPointer) {
        if bytesEqual(bytes, "name") {
            self = .name
        } else if bytesEqual(bytes, "portraitUri") {
            self = .portraitUri
        } else {
            return nil
        }
    }

    public var label: StaticString {
        switch self {
        case .name: "name"
        case .portraitUri: "portraitUri"
        }
    }

    /// The most bytes its value may hold.
    public var limit: Int {
        switch self {
        case .name: ProfileLimits.name
        case .portraitUri: ProfileLimits.portraitUri
        }
    }
}

/// A profile's values as views. An empty field is an absent one.
///
/// Views, valid as long as the memory they point into: whoever makes one says how long.
public struct ProfileValues {
    public var name: UnsafeRawBufferPointer
    public var portraitUri: UnsafeRawBufferPointer

    public init(name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer) {
        self.name = name
        self.portraitUri = portraitUri
    }

    public subscript(field: ProfileField) -> UnsafeRawBufferPointer {
        switch field {
        case .name: name
        case .portraitUri: portraitUri
        }
    }

    public func has(_ field: ProfileField) -> Bool { self[field].count > 0 }

    public var fieldCount: Int { (name.count > 0 ? 1 : 0) + (portraitUri.count > 0 ? 1 : 0) }
}
