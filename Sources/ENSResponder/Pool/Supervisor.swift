public import ENSConfig
public import Logging
internal import POSIX
internal import MailBackends

/// The responder pool's parent process: it owns the listening socket, starts
/// `fcgi.processes` worker processes that inherit it, replaces any that die, and on
/// SIGTERM stops them all (each finishing its requests in flight) before exiting.
///
/// Workers are fresh executions of the same binary (`--worker`), not forks: a forked
/// Swift process with threads is not safe, and a crash in one worker cannot take the
/// others down.
public struct Supervisor {
    /// Where the listening socket comes from.
    public enum SocketSource: Sendable {
        /// Create and own a Unix socket at the configured path.
        case bind
        /// Use a descriptor handed over by spawn-fcgi (0) or systemd (3).
        case inherited(Int32)
    }

    let configuration: ENSConfiguration
    let configPath: String
    let socketSource: SocketSource
    let logger: Logger

    public init(configuration: ENSConfiguration, configPath: String, socketSource: SocketSource, logger: Logger) {
        self.configuration = configuration
        self.configPath = configPath
        self.socketSource = socketSource
        self.logger = logger
    }

    public func run() -> Int32 {
        Signals.ignoreBrokenPipe()
        Signals.block(Signals.shutdownSignals + [Signals.childExited, Signals.reload])

        let listenFD: Int32
        var ownedSocket: (path: String, inode: UInt64)?
        switch socketSource {
        case .inherited(let fd):
            listenFD = fd
        case .bind:
            do {
                let listener = try UnixSocket.listen(path: configuration.pool.socket, mode: configuration.pool.socketMode,
                                                     backlog: configuration.pool.backlog)
                listenFD = listener.fd
                ownedSocket = (configuration.pool.socket, listener.inode)
            } catch {
                logger.critical("cannot listen", metadata: ["socket": "\(configuration.pool.socket)", "error": "\(error)"])
                return 1
            }
        }
        defer { if let ownedSocket { UnixSocket.unlinkIfOurs(path: ownedSocket.path, inode: ownedSocket.inode) } }

        let executable = ChildProcess.currentExecutablePath()
        // Debian's libcurl links librtmp, which links GnuTLS; GnuTLS initializes itself as
        // it loads (p11-kit modules, priority tables) although nothing in ENS uses it: in
        // every worker that is about 1 MB of touched pages (B1's RSS). Workers inherit this.
        Environment.setDefault("GNUTLS_NO_IMPLICIT_INIT", "1")
        // nginx's request limits, for fronts that ask the responders to apply them: one
        // table in shared memory, which every worker (and each replacement) inherits. A
        // pool started on descriptor 0 (mod_fcgid, spawn-fcgi) may be one of several:
        // its workers share limits.table_file with the others instead.
        var limitsArguments: [String] = []
        let oneOfSeveral = if case .inherited(0) = socketSource { true } else { false }
        if !oneOfSeveral, configuration.limits.mode != .off {
            do {
                let (_, fd) = try RequestLimits.shared(mode: configuration.limits.mode, rates: RequestLimits.rates(configuration))
                limitsArguments = ["--limits-fd", String(fd)]
            } catch {
                logger.critical("cannot create the request limits table", metadata: ["error": "\(error)"])
                return 1
            }
        }
        var workers = WorkerTable(count: configuration.pool.processes)
        logger.info("responder pool starting", metadata: [
            "socket": "\(configuration.pool.socket)", "processes": "\(configuration.pool.processes)", "threads": "\(configuration.pool.threads)",
        ])

        func spawnMissing() {
            for slot in workers.slotsReadyToStart(now: MonotonicClock.milliseconds()) {
                do {
                    let pid = try ChildProcess.spawn(
                        executable: executable,
                        arguments: [executable, "--worker", "--slot", String(slot), "--config", configPath] + limitsArguments,
                        listenerOnStandardInput: listenFD
                    )
                    workers.started(slot: slot, pid: pid, now: MonotonicClock.milliseconds())
                    logger.info("worker started", metadata: ["worker.slot": "\(slot)", "worker.pid": "\(pid)"])
                } catch {
                    workers.failedToStart(slot: slot, now: MonotonicClock.milliseconds())
                    logger.error("cannot start worker", metadata: ["worker.slot": "\(slot)", "error": "\(error)"])
                }
            }
        }

        func reapExited() {
            while let (pid, termination) = ChildProcess.reapAny() {
                if let slot = workers.exited(pid: pid, now: MonotonicClock.milliseconds()) {
                    logger.warning("worker exited; replacing it", metadata: [
                        "worker.slot": "\(slot)", "worker.pid": "\(pid)", "worker.termination": "\(termination)",
                        "worker.restart_delay_ms": "\(workers.delay(slot: slot))",
                    ])
                }
            }
        }

        spawnMissing()
        // Under systemd with WatchdogSec=: alive as long as this loop turns.
        let watchdog = SystemdNotifier.watchdogInterval.map { UInt64($0.wholeMilliseconds) }
        var lastWatchdog: UInt64 = 0
        while true {
            let signal = Signals.wait(for: Signals.shutdownSignals + [Signals.childExited, Signals.reload], timeoutMilliseconds: 500)
            if signal == Signals.reload {
                // Each worker reloads for itself (and says so); the pool's own settings
                // (processes, threads, socket) are among what needs a restart.
                ConfigReload.perform(path: configPath, running: configuration.file, logger: logger, alsoApplied: ConfigReload.responderKeys)
                for pid in workers.runningPIDs { Signals.send(Signals.reload, to: pid) }
            } else if let signal, signal != Signals.childExited {
                logger.info("responder pool stopping", metadata: ["signal": "\(Signals.name(signal))"])
                SystemdNotifier.notify("STOPPING=1")
                break
            }
            reapExited()
            spawnMissing()
            if let watchdog, MonotonicClock.milliseconds() - lastWatchdog >= watchdog {
                SystemdNotifier.notify("WATCHDOG=1")
                lastWatchdog = MonotonicClock.milliseconds()
            }
        }

        // Graceful stop: TERM every worker and give them, together, 30 s to finish their
        // requests (systemd's TimeoutStopSec is 40 s), then KILL what is left.
        let running = workers.runningPIDs
        for pid in running { Signals.send(Signals.terminate, to: pid) }
        let deadline = MonotonicClock.milliseconds() + 30_000
        for pid in running {
            let remaining = Int(deadline > MonotonicClock.milliseconds() ? deadline - MonotonicClock.milliseconds() : 0)
            if !ChildProcess.wait(for: pid, timeoutMilliseconds: remaining) {
                logger.warning("worker did not stop in time; killing it", metadata: ["worker.pid": "\(pid)"])
                Signals.send(Signals.kill, to: pid)
                _ = ChildProcess.wait(for: pid, timeoutMilliseconds: 1000)
            }
        }
        logger.info("responder pool stopped")
        return 0
    }
}

/// Which worker runs in which slot, and when a dead slot may be restarted. A worker
/// that dies soon after starting is restarted after a growing delay (up to 10 s), so a
/// broken configuration does not become a fork storm.
struct WorkerTable {
    struct Slot {
        var pid: Int32?
        var startedAt: UInt64 = 0
        var notBefore: UInt64 = 0
        var delay: UInt64 = 0
    }

    private(set) var slots: [Slot]

    init(count: Int) {
        slots = Array(repeating: Slot(), count: count)
    }

    var runningPIDs: [Int32] { slots.compactMap(\.pid) }

    func slotsReadyToStart(now: UInt64) -> [Int] {
        slots.indices.filter { slots[$0].pid == nil && slots[$0].notBefore <= now }
    }

    func delay(slot: Int) -> UInt64 { slots[slot].delay }

    mutating func started(slot: Int, pid: Int32, now: UInt64) {
        slots[slot].pid = pid
        slots[slot].startedAt = now
    }

    mutating func failedToStart(slot: Int, now: UInt64) {
        backOff(slot: slot, now: now)
    }

    /// Records an exit; returns the slot the process occupied (nil for a stranger).
    mutating func exited(pid: Int32, now: UInt64) -> Int? {
        guard let slot = slots.firstIndex(where: { $0.pid == pid }) else { return nil }
        slots[slot].pid = nil
        if now &- slots[slot].startedAt < 5000 {
            backOff(slot: slot, now: now)
        } else {
            slots[slot].delay = 0
            slots[slot].notBefore = now
        }
        return slot
    }

    private mutating func backOff(slot: Int, now: UInt64) {
        slots[slot].delay = min(max(slots[slot].delay * 2, 250), 10_000)
        slots[slot].notBefore = now + slots[slot].delay
    }
}
