public import ENSCore
internal import FastCGI
public import Logging
internal import MariaDB
internal import POSIX
import Synchronization

/// One responder process: `threads` threads, each accepting FastCGI requests on the
/// inherited listening socket with its own request slot and database connection.
///
/// On SIGTERM/SIGINT it stops accepting, lets requests in flight finish, and exits.
public struct Worker {
    let configuration: ENSConfiguration
    let listenFD: Int32
    let logger: Logger

    public init(configuration: ENSConfiguration, listenFD: Int32, logger: Logger) {
        self.configuration = configuration
        self.listenFD = listenFD
        self.logger = logger
    }

    /// Runs until a shutdown signal; returns the process exit status.
    public func run() -> Int32 {
        Signals.ignoreBrokenPipe()
        do {
            try FastCGI.initialize()
        } catch {
            logger.critical("cannot initialise libfcgi", metadata: ["error": "\(error)"])
            return 1
        }
        // Block shutdown signals before any thread exists, so only sigwait sees them
        // (libfcgi's own SIGTERM handler would otherwise only set a flag).
        Signals.block(Signals.shutdownSignals)
        Signals.installInterruptHandler()

        let database: MariaDBConfiguration
        do {
            database = try configuration.serviceDatabase()
        } catch {
            logger.critical("invalid configuration", metadata: ["error": "\(error)"])
            return 1
        }
        let dispatcher = Dispatcher(router: .ens(), maxBodyBytes: configuration.maxBodyBytes, tokenCheck: { _ in false })
        let services = SharedServices()
        let states = (0..<configuration.fcgiThreads).map { _ in ThreadState() }
        var threads: [OSThread] = []
        for index in 0..<configuration.fcgiThreads {
            let state = states[index]
            let configuration = self.configuration
            let listenFD = self.listenFD
            var threadLogger = logger
            threadLogger[metadataKey: "thread"] = "\(index)"
            let logger = threadLogger
            do {
                threads.append(try OSThread.start {
                    Self.serve(listenFD: listenFD, state: state, dispatcher: dispatcher, context: RequestContext(
                        configuration: configuration, services: services,
                        database: Connection(configuration: database), logger: logger))
                })
            } catch {
                logger.critical("cannot start responder thread", metadata: ["error": "\(error)"])
                return 1
            }
        }
        logger.info("responder started", metadata: ["threads": "\(threads.count)"])

        let signal = Signals.wait(for: Signals.shutdownSignals)
        logger.info("shutting down", metadata: ["signal": "\(Signals.name(signal))"])
        FastCGI.requestShutdown()
        // Threads blocked waiting for a request are woken with a signal; threads busy
        // with a request are left alone until they finish it.
        let deadline = MonotonicClock.milliseconds() + 30_000
        while states.contains(where: { !$0.finished.load(ordering: .acquiring) }) && MonotonicClock.milliseconds() < deadline {
            for (index, state) in states.enumerated() where !state.busy.load(ordering: .acquiring) {
                threads[index].interrupt()
            }
            sleepMilliseconds(20)
        }
        logger.info("responder stopped")
        return 0
    }

    private static func serve(listenFD: Int32, state: ThreadState, dispatcher: Dispatcher, context: RequestContext) {
        defer { state.finished.store(true, ordering: .releasing) }
        let slot: FastCGIRequest
        do {
            slot = try FastCGIRequest(listenFD: listenFD)
        } catch {
            context.logger.critical("cannot create FastCGI request", metadata: ["error": "\(error)"])
            return
        }
        while slot.accept() {
            state.busy.store(true, ordering: .releasing)
            dispatcher.respond(to: slot, context: context)
            slot.finish()
            state.busy.store(false, ordering: .releasing)
        }
    }
}

/// What the shutdown loop needs to know about each thread.
final class ThreadState: Sendable {
    let busy = Atomic<Bool>(false)
    let finished = Atomic<Bool>(false)
}
