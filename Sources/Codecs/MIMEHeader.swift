/// A mail header's raw text (From, Subject) as a person reads it: folded lines joined
/// (RFC 5322 §2.2.3), encoded words decoded (RFC 2047: `=?UTF-8?B?...?=`, `=?ISO-8859-1?Q?...?=`),
/// control characters made spaces, and the result cut to a length. Dovecot's push plugin
/// sends both headers raw, so this is where they become text for a notification.
public enum MIMEHeader {
    /// The decoded text of `raw`, at most `limit` UTF-8 bytes (cut at a character, with
    /// "…" when something was left out). Input past `inputLimit` bytes is not looked at.
    /// An encoded word in a charset this does not know stays as it was written; bytes that
    /// are not valid in their charset become U+FFFD.
    public static func decode(_ raw: String, limit: Int = 1024, inputLimit: Int = 16 * 1024) -> String {
        var input = Array(raw.utf8.prefix(inputLimit))
        input = unfolded(input)
        var output: [UInt8] = []
        // The bytes of adjacent encoded words in one charset, decoded together: mailers
        // split a multi-byte character across two words, which RFC 2047 forbids and
        // every reader accepts.
        var pending: (charset: Charset, bytes: [UInt8])?
        func flush() {
            guard let run = pending else { return }
            output += Array(run.charset.text(run.bytes).utf8)
            pending = nil
        }
        // White space between two encoded words is not part of the text (§6.2): it is
        // held in `gap` and dropped when another encoded word follows.
        var gap: [UInt8] = []
        var afterWord = false
        var index = 0
        while index < input.count {
            if let word = encodedWord(in: input, at: index) {
                if let run = pending, run.charset == word.charset {
                    pending?.bytes += word.bytes
                } else {
                    flush()
                    pending = (word.charset, word.bytes)
                }
                gap = []
                afterWord = true
                index = word.end
                continue
            }
            let byte = input[index]
            index += 1
            if afterWord && (byte == 0x20 || byte == 0x09) {
                gap.append(byte)
                continue
            }
            flush()
            output += gap
            gap = []
            afterWord = false
            output.append(byte)
        }
        flush()
        output += gap
        return cleaned(String(decoding: output, as: UTF8.self), limit: limit)
    }

    /// CRLF or LF followed by white space is removed (the white space stays); a line
    /// break that does not fold is kept for `cleaned` to turn into a space.
    static func unfolded(_ bytes: [UInt8]) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x0D, index + 2 < bytes.count, bytes[index + 1] == 0x0A, bytes[index + 2] == 0x20 || bytes[index + 2] == 0x09 {
                index += 2
                continue
            }
            if byte == 0x0A, index + 1 < bytes.count, bytes[index + 1] == 0x20 || bytes[index + 1] == 0x09 {
                index += 1
                continue
            }
            result.append(byte)
            index += 1
        }
        return result
    }

    /// Controls (line breaks, tabs, C1, bidirectional overrides) become spaces, runs of
    /// white space one space, and the ends are trimmed; then the cut to `limit` bytes.
    public static func cleaned(_ text: String, limit: Int) -> String {
        var scalars = String.UnicodeScalarView()
        var lastWasSpace = true
        for scalar in text.unicodeScalars {
            let value = scalar.value
            let isControl = value < 0x20 || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value)
            if isControl || scalar == " " || scalar.properties.isWhitespace {
                if !lastWasSpace { scalars.append(" ") }
                lastWasSpace = true
            } else {
                scalars.append(scalar)
                lastWasSpace = false
            }
        }
        var result = String(scalars)
        if result.hasSuffix(" ") { result.removeLast() }
        guard result.utf8.count > limit else { return result }
        var cut = ""
        for character in result {
            guard cut.utf8.count + character.utf8.count + 3 <= limit else { break }
            cut.append(character)
        }
        return cut + "…"
    }

    /// An encoded word starting at `start`: `=?charset[*language]?B|Q?text?=`, at most 75
    /// characters as RFC 2047 allows (longer ones are taken too, up to 1000, as mailers
    /// write them); nil when there is none or its charset is unknown.
    private static func encodedWord(in bytes: [UInt8], at start: Int) -> (charset: Charset, bytes: [UInt8], end: Int)? {
        guard start + 1 < bytes.count, bytes[start] == UInt8(ascii: "="), bytes[start + 1] == UInt8(ascii: "?") else { return nil }
        let window = bytes[(start + 2)..<min(bytes.count, start + 1000)]
        guard let charsetEnd = window.firstIndex(of: UInt8(ascii: "?")), charsetEnd + 2 < bytes.count,
              bytes[charsetEnd + 2] == UInt8(ascii: "?") else { return nil }
        var charsetName = bytes[(start + 2)..<charsetEnd]
        if let star = charsetName.firstIndex(of: UInt8(ascii: "*")) { charsetName = charsetName[..<star] }
        guard let charset = Charset(String(decoding: charsetName, as: UTF8.self)) else { return nil }
        let encoding = bytes[charsetEnd + 1] | 0x20
        let textStart = charsetEnd + 3
        var end = textStart
        while end + 1 < min(bytes.count, start + 1000) {
            if bytes[end] == UInt8(ascii: "?") && bytes[end + 1] == UInt8(ascii: "=") { break }
            guard bytes[end] > 0x20 && bytes[end] < 0x7F else { return nil }
            end += 1
        }
        guard end + 1 < bytes.count, bytes[end] == UInt8(ascii: "?"), bytes[end + 1] == UInt8(ascii: "=") else { return nil }
        let text = Array(bytes[textStart..<end])
        let decoded: [UInt8]?
        switch encoding {
        case UInt8(ascii: "b"): decoded = Base64.decodeLenient(String(decoding: text, as: UTF8.self))
        case UInt8(ascii: "q"): decoded = quotedPrintable(text)
        default: decoded = nil
        }
        guard let decoded else { return nil }
        return (charset, decoded, end + 2)
    }

    /// RFC 2047's Q encoding: `_` is a space, `=XX` a byte.
    private static func quotedPrintable(_ text: [UInt8]) -> [UInt8]? {
        var result: [UInt8] = []
        var index = 0
        while index < text.count {
            switch text[index] {
            case UInt8(ascii: "_"):
                result.append(0x20)
                index += 1
            case UInt8(ascii: "="):
                guard index + 2 < text.count, let high = Hex.nibble(text[index + 1]), let low = Hex.nibble(text[index + 2]) else { return nil }
                result.append(high << 4 | low)
                index += 3
            default:
                result.append(text[index])
                index += 1
            }
        }
        return result
    }

    /// The charsets mail headers use in practice; the rest stay encoded.
    enum Charset: Equatable {
        case utf8, ascii, latin1, latin9, windows1252

        init?(_ name: String) {
            switch name.lowercased() {
            case "utf-8", "utf8": self = .utf8
            case "us-ascii", "ascii": self = .ascii
            case "iso-8859-1", "iso8859-1", "latin1", "l1": self = .latin1
            case "iso-8859-15", "iso8859-15", "latin9": self = .latin9
            case "windows-1252", "cp1252": self = .windows1252
            default: return nil
            }
        }

        func text(_ bytes: [UInt8]) -> String {
            switch self {
            case .utf8:
                return String(decoding: bytes, as: UTF8.self)
            case .ascii:
                return String(String.UnicodeScalarView(bytes.map { $0 < 0x80 ? Unicode.Scalar($0) : "\u{FFFD}" }))
            case .latin1:
                return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
            case .latin9:
                return String(String.UnicodeScalarView(bytes.map { Self.latin9Differences[$0].flatMap(Unicode.Scalar.init) ?? Unicode.Scalar($0) }))
            case .windows1252:
                return String(String.UnicodeScalarView(bytes.map { byte in
                    guard (0x80...0x9F).contains(byte) else { return Unicode.Scalar(byte) }
                    return Unicode.Scalar(Self.windows1252High[Int(byte - 0x80)]) ?? "\u{FFFD}"
                }))
            }
        }

        /// Where ISO-8859-15 differs from ISO-8859-1.
        private static let latin9Differences: [UInt8: UInt32] = [
            0xA4: 0x20AC, 0xA6: 0x0160, 0xA8: 0x0161, 0xB4: 0x017D, 0xB8: 0x017E, 0xBC: 0x0152, 0xBD: 0x0153, 0xBE: 0x0178,
        ]

        /// Windows-1252's 0x80–0x9F (0xFFFD where it defines nothing).
        private static let windows1252High: [UInt32] = [
            0x20AC, 0xFFFD, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0xFFFD, 0x017D, 0xFFFD,
            0xFFFD, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0xFFFD, 0x017E, 0x0178,
        ]
    }
}
