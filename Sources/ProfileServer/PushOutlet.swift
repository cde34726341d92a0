import CLibevent
import Glibc
import Synchronization

/// A way for other threads to send a connection's pushes (RESP's invalidations) straight to its
/// socket while its worker has nothing of its own to send on it: the thread that committed a
/// change then tells the client caches itself, and the writes are acknowledged without a wait
/// for the tracking connections' workers (`ChangeNotices`).
///
/// Open only between passes over a connection that is quiet: nothing queued or held back,
/// nothing in flight, no reply unfinished (`Worker.finishPass` opens it). The worker shuts it
/// before it reads a value for the connection or sends on the socket, so a push sent meanwhile
/// can neither split a reply nor overtake a reply whose value was read before the change.
/// A plain connection's only (TLS sessions are not shared between threads).
///
/// Thread-safe: any thread may `send`; its worker shuts and opens it; a sender never waits for
/// the worker (it tries the lock, and the worker's own path takes the push when it cannot).
package final class PushOutlet: @unchecked Sendable {
    private struct State {
        /// The socket, or -1 once the connection closed (its number may be reused).
        var fd: Int32
        var open = false
        /// What the socket did not take of a push: it goes before anything else on the
        /// connection (`shut` hands it to the worker).
        var rest: [UInt8] = []
    }

    /// What `send` did with a push.
    package enum Sent {
        /// All of it is on the socket.
        case whole
        /// Part of it is; the rest waits for the worker, which must be woken to send it. It
        /// goes before anything else on the connection, so the push counts as sent.
        case inPart
        /// None of it: the outlet is shut (or the socket refused it); the worker's path takes it.
        case refused
    }

    private let state: Mutex<State>

    package init(fd: Int32) {
        state = Mutex(State(fd: fd))
    }

    /// Sends a whole push to the socket if the outlet is open. Any thread.
    package func send(_ push: UnsafeRawBufferPointer) -> Sent {
        state.withLockIfAvailable { state -> Sent in
            guard state.open else { return .refused }
            let n = Glibc.send(state.fd, push.baseAddress, push.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))
            if n == push.count { return .whole }
            // Nothing went: the worker's path sends it, and notices a broken socket.
            guard n > 0 else { return .refused }
            state.rest = Array(push[n...])
            state.open = false
            return .inPart
        } ?? .refused
    }

    /// Shuts the outlet before its worker touches the connection, and puts what the socket did
    /// not take of a push at the head of the connection's output. The worker's thread.
    package func shut(queueingRestIn output: OpaquePointer) {
        let rest = state.withLock { state -> [UInt8] in
            state.open = false
            defer { state.rest = [] }
            return state.rest
        }
        if !rest.isEmpty { rest.withUnsafeBytes { _ = evbuffer_add(output, $0.baseAddress, $0.count) } }
    }

    /// Opens it: the connection is quiet. The worker's thread.
    package func open() {
        state.withLock { state in
            if state.fd >= 0 && state.rest.isEmpty { state.open = true }
        }
    }

    /// The connection is closing: nothing is sent on its socket from now on. The worker's
    /// thread, before the socket is closed.
    package func retire() {
        state.withLock { state in
            state.open = false
            state.fd = -1
            state.rest = []
        }
    }
}
