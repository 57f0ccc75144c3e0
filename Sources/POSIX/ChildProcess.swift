#if canImport(Glibc)
import Glibc
#endif
internal import CLinux

/// Spawning and reaping child processes (for the responder supervisor).
public enum ChildProcess {
    /// How a child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)

        public var description: String {
            switch self {
            case .exited(let code): "exit status \(code)"
            case .signalled(let signal): "killed by \(Signals.name(signal))"
            }
        }
    }

    /// Spawns `executable` with `arguments` (argv[0] included), with `inheritedFD`
    /// duplicated onto descriptor 0 — the convention of spawn-fcgi and systemd socket
    /// activation, which libfcgi understands.
    public static func spawn(executable: String, arguments: [String], listenerOnStandardInput inheritedFD: Int32) throws(SystemError) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, inheritedFD, 0)

        // The child must start with default signal handling and nothing blocked.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = Signals.makeSet([SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD])
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, &cArguments, environ)
        guard result == 0 else { throw SystemError(call: "posix_spawn", errno: result) }
        return pid
    }

    /// Reaps one finished child without blocking; nil when none has finished.
    public static func reapAny() -> (pid: Int32, termination: Termination)? {
        var status: Int32 = 0
        let pid = waitpid(-1, &status, WNOHANG)
        guard pid > 0 else { return nil }
        return (pid, decode(status))
    }

    /// Waits for `pid` to end, up to `timeoutMilliseconds`; true if it ended.
    public static func wait(for pid: Int32, timeoutMilliseconds: Int) -> Bool {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMilliseconds)
        var status: Int32 = 0
        while MonotonicClock.milliseconds() < deadline {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid || (result == -1 && errno == ECHILD) { return true }
            sleepMilliseconds(10)
        }
        return false
    }

    private static func decode(_ status: Int32) -> Termination {
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros; decode the wait status by hand.
        let signal = status & 0x7f
        return signal == 0 ? .exited((status >> 8) & 0xff) : .signalled(signal)
    }

    /// Path of the running executable, so the supervisor can spawn copies of itself.
    public static func currentExecutablePath() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return CommandLine.arguments[0] }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension ChildProcess {
    /// Runs a command to completion and returns its exit status and standard output.
    /// Standard input is /dev/null; standard error is inherited. (Foundation's Process
    /// can miss SIGCHLD on Linux and hang in waitUntilExit; this uses waitpid directly.)
    public static func run(_ executable: String, _ arguments: [String]) throws(SystemError) -> (status: Int32, output: String) {
        var pipeFDs: [Int32] = [0, 0]
        // Close-on-exec: a child another thread spawns meanwhile must not inherit this
        // pipe's write end, or the read below waits for that child to exit too.
        guard ens_pipe2(&pipeFDs, O_CLOEXEC) == 0 else { throw SystemError(call: "pipe2", errno: errno) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
        var cArguments: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, &cArguments, environ)
        close(pipeFDs[1])
        guard result == 0 else {
            close(pipeFDs[0])
            throw SystemError(call: "posix_spawn", errno: result)
        }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipeFDs[0], &buffer, buffer.count)
            if count > 0 { output.append(contentsOf: buffer[0..<count]); continue }
            if count < 0 && errno == EINTR { continue }
            break
        }
        close(pipeFDs[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let exitCode: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (exitCode, String(decoding: output, as: UTF8.self))
    }
}
