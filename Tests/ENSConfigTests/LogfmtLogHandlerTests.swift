import ENSTestSupport
import Testing
import Logging
@testable import ENSConfig

@Suite struct LogfmtLogHandlerTests {
    private func quote(_ value: String) -> String { LogfmtLogHandler.quote(value) }

    @Test func journalPrioritiesFollowSyslog() {
        #expect(LogfmtLogHandler.priorityPrefix(.critical) == "<2>")
        #expect(LogfmtLogHandler.priorityPrefix(.error) == "<3>")
        #expect(LogfmtLogHandler.priorityPrefix(.warning) == "<4>")
        #expect(LogfmtLogHandler.priorityPrefix(.notice) == "<5>")
        #expect(LogfmtLogHandler.priorityPrefix(.info) == "<6>")
        #expect(LogfmtLogHandler.priorityPrefix(.debug) == "<7>" && LogfmtLogHandler.priorityPrefix(.trace) == "<7>")
    }

    @Test func journalStreamMustNameThisVeryFile() {
        #expect(LogfmtLogHandler.journalStream("64769:1234567", matchesDevice: 64769, inode: 1_234_567))
        for other in ["64769:1234568", "64770:1234567", "64769", "64769:1234567:1", "", ":", "x:y", "-1:1234567"] {
            #expect(!LogfmtLogHandler.journalStream(other, matchesDevice: 64769, inode: 1_234_567), "\(other)")
        }
    }

    /// Reverses `quote`, for round-trip checks.
    private func unquote(_ text: String) -> String? {
        guard text.hasPrefix("\"") else { return text }
        guard text.count >= 2, text.hasSuffix("\"") else { return nil }
        var scalars = Array(text.unicodeScalars.dropFirst().dropLast())
        var out = String.UnicodeScalarView()
        while !scalars.isEmpty {
            let scalar = scalars.removeFirst()
            if scalar == "\"" { return nil }  // an unescaped quote inside
            guard scalar == "\\" else { out.append(scalar); continue }
            guard !scalars.isEmpty else { return nil }
            switch scalars.removeFirst() {
            case "\"": out.append("\"")
            case "\\": out.append("\\")
            case "n": out.append("\n")
            case "r": out.append("\r")
            case "t": out.append("\t")
            case "u":
                guard scalars.first == "{", let close = scalars.firstIndex(of: "}") else { return nil }
                let hex = String(String.UnicodeScalarView(scalars[1..<close]))
                guard let value = UInt32(hex, radix: 16), let decoded = Unicode.Scalar(value) else { return nil }
                out.append(decoded)
                scalars.removeFirst(close + 1)
            default: return nil
            }
        }
        return String(out)
    }

    @Test(arguments: ["plain", "ens-fcgi", "42", "db.error", "a/b:c", "Zoë", "😀", "a,b;c", "'single'"])
    func plainValuesAreUnquoted(value: String) {
        #expect(quote(value) == value)
    }

    @Test func emptyValueIsQuoted() {
        #expect(quote("") == "\"\"")
    }

    @Test func spacesQuotesAndEquals() {
        #expect(quote("database unreachable") == "\"database unreachable\"")
        #expect(quote("say \"hi\"") == "\"say \\\"hi\\\"\"")
        #expect(quote("\"") == "\"\\\"\"")
        #expect(quote("a=b") == "\"a=b\"")
        #expect(quote("back\\slash") == "\"back\\\\slash\"")
        #expect(quote(" ") == "\" \"")
    }

    @Test func controlCharactersAreEscaped() {
        #expect(quote("line1\nline2") == "\"line1\\nline2\"")
        #expect(quote("a\r\nb") == "\"a\\r\\nb\"")
        #expect(quote("tab\there") == "\"tab\\there\"")
        #expect(quote("\u{0}") == "\"\\u{0}\"")
        #expect(quote("\u{1B}[31m") == "\"\\u{1b}[31m\"")
        #expect(quote("\u{1F}") == "\"\\u{1f}\"")
    }

    @Test func otherControlCharactersAreEscapedToo() {
        // DEL, the C1 controls (U+0085 NEXT LINE is a line break to some log tooling,
        // U+009B a terminal CSI) and the Unicode line/paragraph separators.
        for scalar: Unicode.Scalar in ["\u{7F}", "\u{85}", "\u{9B}", "\u{2028}", "\u{2029}"] {
            // A Bool, so a failure message does not print the raw control character.
            let leaksRaw = quote("a\(scalar)b").unicodeScalars.contains(scalar)
            #expect(!leaksRaw, "U+\(String(scalar.value, radix: 16, uppercase: true)) passes through raw")
        }
    }

    @Test func forgedEventsCannotBeInjected() {
        // A value trying to start a second event or a fake key stays inside one quoted field.
        let hostile = "x\n2026-01-01T00:00:00.000Z level=critical msg=\"forged\" key=value"
        let quoted = quote(hostile)
        #expect(!quoted.contains("\n"))
        #expect(quoted.hasPrefix("\"") && quoted.hasSuffix("\""))
        #expect(unquote(quoted) == hostile)
    }

    @Test func everyValueIsOneLineAndRoundTrips() {
        var generator = SeededGenerator(seed: 0x106)
        let pieces: [String] = ["a", "Z", " ", "\"", "\\", "=", "\n", "\r", "\r\n", "\t", "\u{0}", "\u{1}", "\u{1F}", "\u{7F}", "é", "😀",
                                "\\n", "\\\"", "u", "{", "}", "\\u{41}"]
        for _ in 0..<2000 {
            let value = (0..<Int.random(in: 0...12, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
            let quoted = quote(value)
            #expect(!quoted.unicodeScalars.contains { $0.value < 0x20 }, "\(value.debugDescription)")
            #expect(unquote(quoted) == value, "\(value.debugDescription) -> \(quoted.debugDescription)")
            if quoted == value {
                #expect(!value.isEmpty && !value.contains(" ") && !value.contains("=") && !value.contains("\""))
            }
        }
    }

    @Test func timestampShape() {
        let text = LogfmtLogHandler.timestamp()
        let bytes = Array(text.utf8)
        #expect(bytes.count == 24)
        let digitPositions = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
        #expect(digitPositions.allSatisfy { bytes[$0] >= 0x30 && bytes[$0] <= 0x39 })
        #expect(bytes[4] == UInt8(ascii: "-") && bytes[7] == UInt8(ascii: "-") && bytes[10] == UInt8(ascii: "T"))
        #expect(bytes[13] == UInt8(ascii: ":") && bytes[16] == UInt8(ascii: ":") && bytes[19] == UInt8(ascii: "."))
        #expect(bytes[23] == UInt8(ascii: "Z"))
    }
}
