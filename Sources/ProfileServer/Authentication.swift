extension RequestProcessor {
    /// AUTH, on every front: with tokens configured, the connection takes the token's role, or
    /// no role at all for a token that names none, so it must authenticate again; without
    /// tokens every token is accepted and the role stays. Returns whether the token was
    /// accepted; the front's codec words the reply.
    package func authenticate(_ token: UnsafeRawBufferPointer, on connection: Connection) -> Bool {
        guard context.tokens.isEnabled else { return true }
        guard let role = context.tokens.role(of: token) else {
            connection.role = .none
            return false
        }
        connection.role = role
        return true
    }
}
