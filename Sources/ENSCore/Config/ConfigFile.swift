/// The text of an ENS config file: `key = value` lines, `#` comments, blank lines.
///
///     # where nginx finds the responders
///     fcgi.socket = /run/ens/fcgi.sock
///
/// Keys are dotted names from a fixed list (see `ENSConfiguration`); an unknown key is an
/// error, so a typo stops start-up instead of silently falling back to a default.
public struct ConfigFile: Sendable {
    public private(set) var values: [String: String] = [:]
    /// Line number each key was set on, for error messages.
    public private(set) var lines: [String: Int] = [:]

    public init() {}

    public init(parsing text: String) throws(ConfigError) {
        var number = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let line = rawLine.trimmingCharacters(in: " \t\r")
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw ConfigError(key: nil, line: number, problem: "expected 'key = value'")
            }
            let key = String(line[..<equals]).trimmingCharacters(in: " \t")
            let value = String(line[line.index(after: equals)...]).trimmingCharacters(in: " \t")
            guard !key.isEmpty, key.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_") }) else {
                throw ConfigError(key: nil, line: number, problem: "'\(key.prefix(40))' is not a valid key name")
            }
            guard values[key] == nil else {
                throw ConfigError(key: key, line: number, problem: "is set twice (first on line \(lines[key] ?? 0))")
            }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" }) else {
                throw ConfigError(key: key, line: number, problem: "value contains control characters")
            }
            values[key] = value
            lines[key] = number
        }
    }

    /// Sets a value (used for command-line overrides and tests).
    public mutating func set(_ key: String, _ value: String) {
        values[key] = value
    }
}

/// A configuration problem. The message always names the key (or the line), so an
/// operator can find it at 3 a.m.
public struct ConfigError: Error, CustomStringConvertible, Sendable, Equatable {
    public let key: String?
    public let line: Int?
    public let problem: String

    public init(key: String?, line: Int? = nil, problem: String) {
        self.key = key
        self.line = line
        self.problem = problem
    }

    public var description: String {
        switch (key, line) {
        case let (key?, line?): "configuration key '\(key)' (line \(line)) \(problem)"
        case let (key?, nil): "configuration key '\(key)' \(problem)"
        case let (nil, line?): "configuration line \(line): \(problem)"
        case (nil, nil): "configuration: \(problem)"
        }
    }
}

extension StringProtocol {
    /// Trims any of the Unicode scalars in `set` from both ends. (Scalars, not
    /// Characters: "\r\n" is one Character, so a Character set would miss a lone "\n".)
    public func trimmingCharacters(in set: String) -> String {
        let trim = Set(set.unicodeScalars)
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !trim.contains($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !trim.contains($0) })!
        return String(scalars[first...last])
    }
}
