import WireBytes

// Server-assisted client-side caching as Redis 7.4 defines it (CLIENT TRACKING, CLIENT
// CACHING, the invalidation pushes, and SUBSCRIBE for clients that redirect them over RESP2):
// how the requests read and what their errors say, in Redis's order of checks, and the bytes
// of every push. The server decides whom to tell what.

/// The channel a RESP2 client's invalidations are published on, to the connection it
/// redirects them to.
public let respInvalidationChannel: StaticString = "__redis__:invalidate"

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX prefix ...] [OPTIN] [OPTOUT] [NOLOOP]`.
///
/// A plain value; the thread that decoded the request uses it.
public struct RESPTrackingRequest: Equatable {
    public var on: Bool
    /// The client that gets the invalidations instead; nil for this connection itself.
    public var redirect: Int?
    public var bcast = false
    public var optin = false
    public var optout = false
    public var noloop = false
    public var prefixes: [[UInt8]] = []

    /// How tracking is on for a connection now, which the request must agree with.
    public struct Current {
        public var on: Bool
        public var bcast: Bool
        public var optin: Bool
        public var optout: Bool
        public var prefixes: [[UInt8]]

        public init(on: Bool, bcast: Bool, optin: Bool, optout: Bool, prefixes: [[UInt8]]) {
            self.on = on
            self.bcast = bcast
            self.optin = optin
            self.optout = optout
            self.prefixes = prefixes
        }
    }

    /// Reads the request (`arguments` from `CLIENT` on) as Redis does: the options first, each
    /// REDIRECT checked against `clientExists` where it stands, then ON or OFF, then, for ON,
    /// whether the options agree with each other and with `current`.
    public static func parse(_ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>, current: Current,
                             clientExists: (Int) -> Bool) -> Result<RESPTrackingRequest, RESPProblem> {
        var request = RESPTrackingRequest(on: false)
        var index = 3
        while index < arguments.count {
            let option = arguments[index]
            let more = arguments.count - 1 - index
            if RESPKeyword.matches(option, "REDIRECT") && more > 0 {
                index += 1
                if request.redirect != nil { return .failure(.fixed(RESPText.trackingOneRedirect)) }
                guard let id = RESPArgument.integer(arguments[index]) else { return .failure(.fixed(RESPText.notInteger)) }
                guard clientExists(id) else { return .failure(.fixed(RESPText.trackingNoSuchClient)) }
                request.redirect = id
            } else if RESPKeyword.matches(option, "BCAST") {
                request.bcast = true
            } else if RESPKeyword.matches(option, "OPTIN") {
                request.optin = true
            } else if RESPKeyword.matches(option, "OPTOUT") {
                request.optout = true
            } else if RESPKeyword.matches(option, "NOLOOP") {
                request.noloop = true
            } else if RESPKeyword.matches(option, "PREFIX") && more > 0 {
                index += 1
                request.prefixes.append(Array(arguments[index]))
            } else {
                return .failure(.fixed(RESPText.syntax))
            }
            index += 1
        }
        if RESPKeyword.matches(arguments[2], "ON") {
            request.on = true
        } else if RESPKeyword.matches(arguments[2], "OFF") {
            return .success(request)
        } else {
            return .failure(.fixed(RESPText.syntax))
        }
        if !request.bcast && !request.prefixes.isEmpty { return .failure(.fixed(RESPText.trackingPrefixNeedsBcast)) }
        if current.on && current.bcast != request.bcast { return .failure(.fixed(RESPText.trackingBcastSwitch)) }
        if request.bcast && (request.optin || request.optout) { return .failure(.fixed(RESPText.trackingOptWithBcast)) }
        if request.optin && request.optout { return .failure(.fixed(RESPText.trackingOptinAndOptout)) }
        if (request.optin && current.optout) || (request.optout && current.optin) {
            return .failure(.fixed(RESPText.trackingOptSwitch))
        }
        if request.bcast, let problem = prefixCollision(request.prefixes, existing: current.prefixes) {
            return .failure(problem)
        }
        return .success(request)
    }

    /// Redis's check that no two prefixes of one client overlap (one starts the other).
    private static func prefixCollision(_ prefixes: [[UInt8]], existing: [[UInt8]]) -> RESPProblem? {
        func overlap(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            a.count <= b.count ? b.starts(with: a) : a.starts(with: b)
        }
        for (i, prefix) in prefixes.enumerated() {
            if let old = existing.first(where: { overlap($0, prefix) }) {
                return .made(Array("ERR Prefix '".utf8) + prefix + Array("' overlaps with an existing prefix '".utf8) + old
                             + Array("'. Prefixes for a single client must not overlap.".utf8))
            }
            for other in prefixes[(i + 1)...] where overlap(prefix, other) {
                return .made(Array("ERR Prefix '".utf8) + prefix + Array("' overlaps with another provided prefix '".utf8) + other
                             + Array("'. Prefixes for a single client must not overlap.".utf8))
            }
        }
        return nil
    }
}

/// The pushes of client-side caching and of SUBSCRIBE, as bytes. Not on any request's hot
/// path: each is made when a change or a subscription happens.
///
/// Stateless; any thread may use it.
public enum RESPPush {
    /// The keys' invalidation for a connection speaking `version`: a RESP3 push
    /// `>2 invalidate [keys]`, or, in RESP2 (only to a connection subscribed to the
    /// invalidation channel), the pub/sub message `message __redis__:invalidate [keys]`.
    public static func invalidation(keys: [[UInt8]], _ version: RESPVersion) -> [UInt8] {
        var bytes = header(version)
        bytes += Array("*\(keys.count)\r\n".utf8)
        for key in keys { bulk(key, into: &bytes) }
        return bytes
    }

    /// Everything the client cached is void (FLUSHALL, or a node that lost its lease): the
    /// invalidation whose keys are null, the null of `nullVersion`, the tracking client's own.
    public static func flush(_ version: RESPVersion, nullVersion: RESPVersion) -> [UInt8] {
        header(version) + Array((nullVersion == .resp3 ? "_\r\n" : "$-1\r\n").utf8)
    }

    /// The client a RESP3 connection redirected its invalidations to is gone.
    public static func redirectBroken(_ id: Int) -> [UInt8] {
        Array(">2\r\n$21\r\ntracking-redir-broken\r\n:\(id)\r\n".utf8)
    }

    /// SUBSCRIBE's or UNSUBSCRIBE's reply for one channel (nil: none), with the number of
    /// channels the connection is subscribed to after it: a push in RESP3, an array in RESP2.
    public static func subscription(_ kind: StaticString, channel: UnsafeRawBufferPointer?, count: Int,
                                    _ version: RESPVersion) -> [UInt8] {
        var bytes = Array("\(version == .resp3 ? ">" : "*")3\r\n".utf8)
        bulk(Array(UnsafeRawBufferPointer(start: kind.utf8Start, count: kind.utf8CodeUnitCount)), into: &bytes)
        if let channel { bulk(Array(channel), into: &bytes) } else { bytes += Array((version == .resp3 ? "_\r\n" : "$-1\r\n").utf8) }
        bytes += Array(":\(count)\r\n".utf8)
        return bytes
    }

    /// PING's reply on a RESP2 connection subscribed to a channel: `pong` and the message.
    public static func subscribedPong(_ message: UnsafeRawBufferPointer?) -> [UInt8] {
        var bytes = Array("*2\r\n$4\r\npong\r\n".utf8)
        bulk(message.map { Array($0) } ?? [], into: &bytes)
        return bytes
    }

    private static func header(_ version: RESPVersion) -> [UInt8] {
        version == .resp3
            ? Array(">2\r\n$10\r\ninvalidate\r\n".utf8)
            : Array("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n".utf8)
    }

    private static func bulk(_ value: [UInt8], into bytes: inout [UInt8]) {
        bytes += Array("$\(value.count)\r\n".utf8)
        bytes += value
        bytes += Array("\r\n".utf8)
    }
}

extension RESPCommandName {
    /// Whether a RESP2 connection subscribed to a channel may run it (Redis also allows the
    /// pattern and shard forms of SUBSCRIBE and RESET, which profiled does not have).
    public var runsWhileSubscribed: Bool {
        switch self {
        case .subscribe, .unsubscribe, .ping, .quit: true
        default: false
        }
    }
}

extension RESPText {
    /// A RESP2 connection subscribed to a channel sent another command; CLIENT's subcommand is
    /// named as Redis names it (`client|id`).
    public static func onlySubscriptionCommands(_ command: RESPCommandName,
                                                _ arguments: UnsafeBufferPointer<UnsafeRawBufferPointer>) -> RESPProblem {
        let name = command.name
        var full = Array(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        if command == .client || command == .config || command == .command, arguments.count > 1 {
            full += [UInt8(ascii: "|")] + arguments[1].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        }
        return .made(Array("ERR Can't execute '".utf8) + full
                     + Array("': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context".utf8))
    }


    public static let trackingOneRedirect: StaticString = "ERR A client can only redirect to a single other client"
    public static let trackingNoSuchClient: StaticString = "ERR The client ID you want redirect to does not exist"
    public static let trackingPrefixNeedsBcast: StaticString = "ERR PREFIX option requires BCAST mode to be enabled"
    public static let trackingBcastSwitch: StaticString =
        "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
    public static let trackingOptWithBcast: StaticString = "ERR OPTIN and OPTOUT are not compatible with BCAST"
    public static let trackingOptinAndOptout: StaticString = "ERR You can't specify both OPTIN mode and OPTOUT mode"
    public static let trackingOptSwitch: StaticString =
        "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."
    public static let cachingNeedsTracking: StaticString =
        "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
    public static let cachingYesNeedsOptin: StaticString = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
    public static let cachingNoNeedsOptout: StaticString = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
    public static let subscribeInTransaction: StaticString = "ERR SUBSCRIBE and UNSUBSCRIBE cannot be queued in a transaction"
}
