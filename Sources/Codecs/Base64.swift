/// Base64 (RFC 4648 standard alphabet) without Foundation.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], alphabet[Int(value >> 6 & 63)], alphabet[Int(value & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let value = UInt32(bytes[index]) << 16
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], UInt8(ascii: "="), UInt8(ascii: "=")]
        } else if rest == 2 {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], alphabet[Int(value >> 6 & 63)], UInt8(ascii: "=")]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes the way the API contract asks: standard alphabet, padding optional,
    /// line breaks and tabs ignored, and a space read as `+` (what form decoding makes
    /// of an unescaped `+`). Nil for anything else.
    public static func decodeLenient(_ text: String) -> [UInt8]? {
        var sextets: [UInt8] = []
        sextets.reserveCapacity(text.utf8.count)
        var padding = 0
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"):
                continue
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { return nil }
            default:
                guard padding == 0 else { return nil }  // data after padding
                let value = byte == UInt8(ascii: " ") ? 62 : decodeTable[Int(byte)]
                guard value != 0xFF else { return nil }
                sextets.append(value)
            }
        }
        guard sextets.count % 4 != 1 else { return nil }
        if padding > 0 && (sextets.count + padding) % 4 != 0 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(sextets.count * 3 / 4)
        var index = 0
        while index + 4 <= sextets.count {
            let value = UInt32(sextets[index]) << 18 | UInt32(sextets[index + 1]) << 12 | UInt32(sextets[index + 2]) << 6 | UInt32(sextets[index + 3])
            out += [UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
            index += 4
        }
        let rest = sextets.count - index
        if rest == 2 {
            let value = UInt32(sextets[index]) << 18 | UInt32(sextets[index + 1]) << 12
            out.append(UInt8(value >> 16 & 0xFF))
        } else if rest == 3 {
            let value = UInt32(sextets[index]) << 18 | UInt32(sextets[index + 1]) << 12 | UInt32(sextets[index + 2]) << 6
            out += [UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF)]
        }
        return out
    }

    /// URL-safe base64 (RFC 4648 §5) without padding, as callback URLs carry it.
    public static func encodeURLSafe(_ bytes: [UInt8]) -> String {
        var text = encode(bytes)
        while text.hasSuffix("=") { text.removeLast() }
        return String(text.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }

    /// Strict URL-safe base64 without padding; nil for any other character, and for a
    /// last character whose unused low bits are not zero: each byte string has exactly
    /// one spelling, so a URL cannot be altered into another that opens the same way.
    public static func decodeURLSafe(_ text: String) -> [UInt8]? {
        guard text.utf8.allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F }),
              let bytes = decodeLenient(String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })),
              encodeURLSafe(bytes) == text else {
            return nil
        }
        return bytes
    }
}
