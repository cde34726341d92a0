/// What one field of a profile becomes in a `WriteOperation.patch`.
///
/// A plain value holding views: valid while the bytes it points at are.
public enum FieldEdit {
    /// The field keeps its value.
    case keep
    /// The field takes this value (empty empties it).
    case set(UnsafeRawBufferPointer)
    /// The field takes this value only when it is empty now.
    case setIfEmpty(UnsafeRawBufferPointer)
}

/// One change (or read) of the store, as a front decoded it. Every value is checked against
/// the protocol's limits before it gets here.
///
/// A plain value holding views into the `WriteUnit` that returned it.
public enum WriteOperation {
    /// Creates or replaces the profile.
    case put(userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, portraitUri: UnsafeRawBufferPointer)
    /// Edits fields of the profile. A missing profile is created with empty fields first when
    /// `createsMissing`, and left missing otherwise. When `removesEmptied`, a profile whose
    /// fields are both empty afterwards is removed (the hash view of a profile, where an empty
    /// field is an absent one).
    case patch(userId: UnsafeRawBufferPointer, name: FieldEdit, portraitUri: FieldEdit,
               createsMissing: Bool, removesEmptied: Bool)
    /// Removes the profile, if there is one.
    case remove(userId: UnsafeRawBufferPointer)
    /// Changes nothing: the outcome tells the profile as it is at this point of the unit,
    /// after the operations before it (reads inside a transaction).
    case read(userId: UnsafeRawBufferPointer)
    /// Removes every profile.
    case removeAll
}

extension WriteOperation {
    /// The id the operation is about; nil for `.removeAll`.
    public var userId: UnsafeRawBufferPointer? {
        switch self {
        case .put(let userId, _, _), .patch(let userId, _, _, _, _), .remove(let userId), .read(let userId): userId
        case .removeAll: nil
        }
    }
}

/// Operations that commit together, all or none: one request of a client (a SET, an MSET, a
/// RESP transaction). The store asks for each operation while it commits the unit, in order.
///
/// Threading: the store reads it on the thread that called `ProfileWritePath.commit`; the
/// views it returns must stay valid until that call returns.
public protocol WriteUnit: AnyObject {
    var operationCount: Int { get }
    func operation(at index: Int) -> WriteOperation
}

/// Whether a profile exists, and which of its fields hold something.
///
/// A plain value; any thread.
public enum ProfileState: Equatable, Sendable {
    case absent
    case present(hasName: Bool, hasPortraitUri: Bool)

    public var exists: Bool { self != .absent }
}

/// What the caller already knows about a profile that the store has not had a write for since
/// its table last took one: the server's cache, which never holds anything older than a
/// committed write. It spares the store a read of its table.
///
/// A plain value holding views valid during the call that returned it.
public enum KnownProfile {
    /// Not known: the store looks.
    case unknown
    case absent
    /// It exists; its fields when the caller has them at hand.
    case present(ProfileRow?)
}

/// What committing a unit did to each of its operations, by index.
///
/// Threading: valid only inside the `report` call that received it; views are too.
public struct WriteOutcomes {
    let states: UnsafeBufferPointer<OperationOutcome>
    /// Where the rows after lie: the commit's bytes, and a side buffer for the outcomes marked
    /// `inSide` (a store that logs its commits keeps there the values it does not log).
    let bytes: UnsafeRawPointer
    let side: UnsafeRawPointer

    /// Outcomes whose rows lie in `bytes`, or in `side` for those marked `inSide`.
    public init(_ states: UnsafeBufferPointer<OperationOutcome>, bytes: UnsafeRawPointer, side: UnsafeRawPointer? = nil) {
        self.states = states
        self.bytes = bytes
        self.side = side ?? bytes
    }

    /// The profile's state before the operation (for `.read`: as it is).
    public func before(_ index: Int) -> ProfileState { states[index].before }

    /// The profile after the operation, or nil when there is none; for `.removeAll`, nil.
    public func after(_ index: Int) -> ProfileRow? {
        let outcome = states[index]
        guard outcome.exists else { return nil }
        let bytes = outcome.inSide ? side : self.bytes
        return ProfileRow(
            userId: UnsafeRawBufferPointer(start: bytes + outcome.userId.lowerBound, count: outcome.userId.count),
            name: UnsafeRawBufferPointer(start: bytes + outcome.name.lowerBound, count: outcome.name.count),
            portraitUri: UnsafeRawBufferPointer(start: bytes + outcome.portraitUri.lowerBound,
                                                count: outcome.portraitUri.count))
    }

    /// Whether the operation changed the store (a patch or removal that found nothing to do did not).
    public func changed(_ index: Int) -> Bool { states[index].changed }

    /// The id an operation that changed the store wrote or removed (empty for `.removeAll`).
    public func userId(_ index: Int) -> UnsafeRawBufferPointer {
        let outcome = states[index]
        return UnsafeRawBufferPointer(start: (outcome.inSide ? side : bytes) + outcome.userId.lowerBound,
                                      count: outcome.userId.count)
    }
}

/// One operation's outcome inside a commit: its state before, and where its row after lies in
/// the commit's bytes (in its side buffer when `inSide`).
///
/// A plain value; any thread.
public struct OperationOutcome: Sendable {
    public var before: ProfileState
    public var exists: Bool
    public var changed: Bool
    public var inSide: Bool
    public var userId: Range<Int>
    public var name: Range<Int>
    public var portraitUri: Range<Int>

    /// An outcome whose row after (when `exists`) lies at these ranges of the commit's bytes,
    /// or of its side buffer when `inSide`.
    public init(before: ProfileState, exists: Bool, changed: Bool, inSide: Bool = false, userId: Range<Int>,
                name: Range<Int>, portraitUri: Range<Int>) {
        self.before = before
        self.exists = exists
        self.changed = changed
        self.inSide = inSide
        self.userId = userId
        self.name = name
        self.portraitUri = portraitUri
    }

    public static let none = OperationOutcome(before: .absent, exists: false, changed: false,
                                              userId: 0..<0, name: 0..<0, portraitUri: 0..<0)
}

/// How a unit's commit ended.
///
/// Threading: valid only inside the `report` call that received it.
public enum WriteResult {
    case committed(WriteOutcomes)
    /// Nothing of the unit changed the store.
    case failed(StoreError)
}
