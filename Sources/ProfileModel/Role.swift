import WireBytes

/// What a connection may do. Roles nest: each allows everything the lower ones do.
///
/// A plain value; any thread may use it.
public enum Role: UInt8, Sendable, Comparable, CaseIterable {
    /// A connection that has not authenticated while tokens are configured.
    case none
    case read
    case write
    case admin

    public static func < (lhs: Role, rhs: Role) -> Bool {
        lhs.rawValue < rhs.rawValue
    }

    /// Reads a role as written in the tokens file: `read`, `write` or `admin`,
    /// exactly. `none` is no role one can be given, so it is nil like any other word.
    public init?(name: some Collection<UInt8>) {
        for role in [Role.read, .write, .admin] where name.elementsEqual(textBytes(role.name)) {
            self = role
            return
        }
        return nil
    }

    /// The role's lower-case name.
    public var name: StaticString {
        switch self {
        case .none: "none"
        case .read: "read"
        case .write: "write"
        case .admin: "admin"
        }
    }
}
