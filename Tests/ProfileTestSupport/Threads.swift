import Glibc

/// Runs `body(i)` for i in 0..<count, each on its own POSIX thread, and waits for all of them.
/// Blocking sockets in the bodies are fine: these are not the cooperative pool's threads.
public func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    final class Box {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }
    var threads: [pthread_t] = []
    for i in 0..<count {
        let context = Unmanaged.passRetained(Box { body(i) }).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, context)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
}
