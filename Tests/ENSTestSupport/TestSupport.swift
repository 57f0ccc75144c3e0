// Shared helpers for the unit tests: a seeded random generator (so a failing case can be
// reproduced), a shell runner for cross-checks against independent implementations
// (the openssl CLI, Python's hashlib/hmac/cryptography), temporary files, and RSA keys
// generated once per test process.
public import Foundation
public import OpenSSL
internal import POSIX

/// SplitMix64: small, fast, deterministic. Every randomized test prints nothing and
/// uses a fixed seed, so a failure reproduces on every run.
public struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    public mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) }
    }

    /// Text of 0 to `maximumLength` scalars drawn from `alphabet`: for the tests that
    /// hold an escaper or a reader against an independent one.
    public mutating func text(from alphabet: [Unicode.Scalar], maximumLength: Int) -> String {
        var scalars = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...maximumLength, using: &self) {
            scalars.append(alphabet[Int.random(in: 0..<alphabet.count, using: &self)])
        }
        return String(scalars)
    }
}

public enum TestFailure: Error, CustomStringConvertible {
    case command(status: Int32, script: String)

    public var description: String {
        switch self {
        case .command(let status, let script): "command exited with status \(status): \(script)"
        }
    }
}

public enum Shell {
    /// Runs `script` with `/bin/sh -c`; `arguments` arrive as $1, $2, … so nothing needs
    /// quoting. Throws unless the exit status is 0. Returns standard output with
    /// surrounding whitespace removed.
    public static func run(_ script: String, _ arguments: [String] = []) throws -> String {
        let (status, output) = try ChildProcess.run("/bin/sh", ["-c", script, "sh"] + arguments)
        guard status == 0 else { throw TestFailure.command(status: status, script: script) }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs a Python 3 program; `arguments` arrive as sys.argv[1:].
    public static func python(_ program: String, _ arguments: [String] = []) throws -> String {
        try run("program=$1; shift; exec python3 -c \"$program\" \"$@\"", [program] + arguments)
    }

    /// A fresh private key from `openssl genpkey` with `options` (e.g. "-algorithm x25519"),
    /// as PKCS#8 PEM.
    public static func genpkey(_ options: String) throws -> String {
        try run("openssl genpkey \(options) 2>/dev/null")
    }
}

/// A fresh directory under the system temporary directory, removed afterwards.
public func withTemporaryDirectory<T>(_ body: (URL) throws -> T) throws -> T {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("ens-unit-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try body(directory)
}

extension URL {
    public func write(_ bytes: [UInt8]) throws { try Data(bytes).write(to: self) }
    public func write(_ text: String) throws { try Data(text.utf8).write(to: self) }
}

/// RSA keys are slow to generate (~0.3 s); each is made once per process and shared.
public enum TestKeys {
    public static let primary: RSAPrivateKey = try! RSAPrivateKey.generate()
    public static let secondary: RSAPrivateKey = try! RSAPrivateKey.generate()
}
