public import ENSStore
public import Logging
internal import OpenSSL
internal import ENSModel
internal import POSIX

extension KeyPool {
    /// Generates keys until the pool holds `target`, using `threads` threads for the
    /// (slow, CPU-bound) generation, and stores them 50 at a time. Returns how many were
    /// added. Throws a statement's `DatabaseError`, the generation's `OpenSSLError`, or
    /// `SystemError` when no thread starts.
    @discardableResult
    public func refill(to target: Int, threads: Int = 2, logger: Logger, progress: (Int) -> Void = { _ in }) throws -> Int {
        var missing = max(0, target - (try count()))
        var added = 0
        while missing > 0 {
            let batch = min(missing, 50)
            try store(try KeyGenerator.generate(count: batch, threads: threads))
            added += batch
            missing -= batch
            logger.debug("key pool batch stored", metadata: ["keys.added": "\(added)"])
            progress(added)
        }
        return added
    }
}

/// RSA-2048 generation on several threads.
enum KeyGenerator {
    static func generate(count: Int, threads: Int) throws -> [RSAPrivateKey] {
        let results = SynchronizedBox<[Result<RSAPrivateKey, OpenSSLError>]>([])
        let perThread = (count + max(threads, 1) - 1) / max(threads, 1)
        var workers: [OSThread] = []
        for worker in 0..<max(threads, 1) {
            let share = min(perThread, count - worker * perThread)
            if share <= 0 { break }
            workers.append(try OSThread.start(stackSize: 1 << 20) {
                for _ in 0..<share {
                    let result = Result { () throws(OpenSSLError) -> RSAPrivateKey in try RSAPrivateKey.generate() }
                    results.withLock { $0.append(result) }
                }
            })
        }
        for worker in workers { worker.join() }
        return try results.withLock { results in try results.map { try $0.get() } }
    }
}
