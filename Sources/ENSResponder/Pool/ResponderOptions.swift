/// ens-fcgi's command line. Parsed here rather than with swift-argument-parser, which
/// links FoundationEssentials into the binary: every worker process of the pool would
/// map and touch it (B1's responder RSS) for five options.
public struct ResponderOptions: Equatable, Sendable {
    public var config: String?
    public var check = false
    public var inheritSocket = false
    /// Internal: how the pool starts its workers.
    public var worker = false
    public var slot = 0
    /// Internal: the descriptor of the pool's shared request-limit table.
    public var limitsFD: Int32?

    public init() {}

    /// What the command line asks for.
    public enum Parsed: Equatable, Sendable {
        case run(ResponderOptions)
        case help
        case version
    }

    /// A command line ens-fcgi does not take: the message names the argument (an
    /// option name, never a value, which could be a path the operator typed).
    public struct UsageError: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Parses the arguments after the program name. Options take their value as the
    /// next argument or after `=`; each may be given once.
    public static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        var options = ResponderOptions()
        var seen: Set<String> = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "-h" || argument == "--help" { return .help }
            if argument == "--version" { return .version }
            guard argument.hasPrefix("--") else { throw UsageError(description: "unexpected argument '\(argument.prefix(64))'") }
            let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            let inline = parts.count > 1 ? String(parts[1]) : nil
            guard seen.insert(name).inserted else { throw UsageError(description: "\(name) given twice") }
            func value() throws(UsageError) -> String {
                if let inline { return inline }
                guard index < arguments.count else { throw UsageError(description: "\(name) needs a value") }
                index += 1
                return arguments[index - 1]
            }
            func flag() throws(UsageError) -> Bool {
                guard inline == nil else { throw UsageError(description: "\(name) takes no value") }
                return true
            }
            switch name {
            case "--config": options.config = try value()
            case "--check": options.check = try flag()
            case "--inherit-socket": options.inheritSocket = try flag()
            case "--worker": options.worker = try flag()
            case "--slot":
                guard let slot = Int(try value()), slot >= 0 else { throw UsageError(description: "--slot needs a whole number") }
                options.slot = slot
            case "--limits-fd":
                guard let fd = Int32(try value()), fd > 2 else { throw UsageError(description: "--limits-fd needs a descriptor above 2") }
                options.limitsFD = fd
            default: throw UsageError(description: "unknown option '\(name.prefix(64))'")
            }
        }
        return .run(options)
    }

    public static let usage = """
        USAGE: ens-fcgi [--config <config>] [--check] [--inherit-socket] [--version]

        ENS FastCGI responder pool (run behind nginx).

        Listens on fcgi.socket (or a socket handed over by spawn-fcgi on descriptor 0, or
        by systemd socket activation on descriptor 3) and starts fcgi.processes worker
        processes of fcgi.threads threads each. SIGTERM stops accepting, finishes requests
        in flight and exits 0; SIGHUP re-reads the configuration (applies log.level, names
        the changes that need a restart).

        Started by a web server as a CGI program (GATEWAY_INTERFACE=CGI/1.1 and
        REQUEST_METHOD in the environment), it answers that one request and exits; the
        configuration then comes from $ENS_CONFIG, else /etc/ens/ens.conf.

        Exit status: 0 after a clean stop or a good --check, 1 on a configuration or
        start-up error, 64 on a command line it does not take.

        OPTIONS:
          --config <config>   Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).
          --check             Check the configuration and the secrets it names, print
                              'configuration OK' and exit.
          --inherit-socket    Use the socket on descriptor 0 (as spawn-fcgi passes it)
                              instead of binding fcgi.socket.
          --version           Print the release (ens-fcgi <version>) and exit.
          -h, --help          Show this help.

        """
}
