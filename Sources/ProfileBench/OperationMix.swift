/// What one request does, as `--mix` names it.
public enum Operation: Int, CaseIterable, Sendable, CustomStringConvertible {
    case get, mget, set, update, del, exists
    /// Both fields of one id by name (resp only: HMGET key name portraitUri).
    case hmget
    /// An operator's requests (profiled only): COUNT, STATS, RECENT 20, and SCAN 100 from a
    /// random id.
    case count, stats, recent, scan

    public var description: String {
        switch self {
        case .get: "get"
        case .mget: "mget"
        case .set: "set"
        case .update: "update"
        case .del: "del"
        case .exists: "exists"
        case .hmget: "hmget"
        case .count: "count"
        case .stats: "stats"
        case .recent: "recent"
        case .scan: "scan"
        }
    }

    /// Whether it looks ids up (and so may ask for missing ones under `--miss-ratio`).
    var isLookup: Bool { self == .get || self == .mget || self == .exists || self == .hmget }

    /// Whether it is one of an operator's requests (COUNT, STATS, RECENT, SCAN).
    var isOperators: Bool { self == .count || self == .stats || self == .recent || self == .scan }
}

/// A command line or option that cannot be used: one sentence for stderr, exit 64.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The share of each operation in a load, parsed from `get=90,set=5,mget=5`.
///
/// A value type; any thread may use it.
public struct OperationMix: Sendable, Equatable, CustomStringConvertible {
    /// Operations with a weight above zero, in the order given.
    public let weights: [(operation: Operation, weight: Int)]
    private let cumulative: [Int]
    private let total: Int

    public init(_ weights: [(operation: Operation, weight: Int)]) {
        self.weights = weights.filter { $0.weight > 0 }
        var running = 0
        cumulative = self.weights.map { running += $0.weight; return running }
        total = running
    }

    public static func == (a: OperationMix, b: OperationMix) -> Bool {
        a.weights.elementsEqual(b.weights) { $0.operation == $1.operation && $0.weight == $1.weight }
    }

    /// Parses `op=weight[,op=weight...]`; weights are whole numbers and need not add up to 100.
    public static func parse(_ text: String) throws(UsageError) -> OperationMix {
        let names = Operation.allCases.map(\.description).joined(separator: ", ")
        var seen: Set<Operation> = []
        var weights: [(operation: Operation, weight: Int)] = []
        guard !text.isEmpty else { throw UsageError("--mix is empty: give op=weight pairs, e.g. get=90,set=10") }
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: "=", omittingEmptySubsequences: false)
            guard pieces.count == 2 else { throw UsageError("--mix: '\(part)' is not op=weight") }
            guard let operation = Operation.allCases.first(where: { $0.description == pieces[0] }) else {
                throw UsageError("--mix: unknown operation '\(pieces[0])' (operations: \(names))")
            }
            guard let weight = Int(pieces[1]), (0...1_000_000).contains(weight) else {
                throw UsageError("--mix: the weight of \(operation) must be a whole number from 0 to 1000000, not '\(pieces[1])'")
            }
            guard seen.insert(operation).inserted else { throw UsageError("--mix: \(operation) is listed twice") }
            weights.append((operation, weight))
        }
        let mix = OperationMix(weights)
        guard mix.total > 0 else { throw UsageError("--mix: the weights add up to 0") }
        return mix
    }

    /// The operation for a number drawn uniformly from 0..<total.
    @inline(__always)
    func pick(_ random: inout RandomSource) -> Operation {
        if weights.count == 1 { return weights[0].operation }
        let r = random.below(total)
        var i = 0
        while cumulative[i] <= r { i += 1 }
        return weights[i].operation
    }

    public func contains(_ operation: Operation) -> Bool {
        weights.contains { $0.operation == operation }
    }

    public var description: String {
        weights.map { "\($0.operation)=\($0.weight)" }.joined(separator: ",")
    }
}
