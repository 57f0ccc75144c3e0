/// Base64 (RFC 4648 standard alphabet) without Foundation.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    public static func encode(_ bytes: [UInt8]) -> String {
        encode(bytes, alphabet: alphabet, padded: true)
    }

    /// Both alphabets, padded or not, written straight into the string's storage: callback
    /// URLs and sealed payloads are encoded on every request.
    private static func encode(_ bytes: [UInt8], alphabet: [UInt8], padded: Bool) -> String {
        String(unsafeUninitializedCapacity: (bytes.count + 2) / 3 * 4) { out in
            var written = 0
            func put(_ sextet: UInt32) {
                out[written] = alphabet[Int(sextet & 63)]
                written += 1
            }
            var index = 0
            while index + 3 <= bytes.count {
                let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
                put(value >> 18); put(value >> 12); put(value >> 6); put(value)
                index += 3
            }
            switch bytes.count - index {
            case 1:
                let value = UInt32(bytes[index]) << 16
                put(value >> 18); put(value >> 12)
            case 2:
                let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
                put(value >> 18); put(value >> 12); put(value >> 6)
            default:
                break
            }
            while padded && written % 4 != 0 {
                out[written] = UInt8(ascii: "=")
                written += 1
            }
            return written
        }
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
            out.append(UInt8(value >> 16 & 0xFF))
            out.append(UInt8(value >> 8 & 0xFF))
            out.append(UInt8(value & 0xFF))
            index += 4
        }
        let rest = sextets.count - index
        if rest == 2 {
            let value = UInt32(sextets[index]) << 18 | UInt32(sextets[index + 1]) << 12
            out.append(UInt8(value >> 16 & 0xFF))
        } else if rest == 3 {
            let value = UInt32(sextets[index]) << 18 | UInt32(sextets[index + 1]) << 12 | UInt32(sextets[index + 2]) << 6
            out.append(UInt8(value >> 16 & 0xFF))
            out.append(UInt8(value >> 8 & 0xFF))
        }
        return out
    }

    /// URL-safe base64 (RFC 4648 §5) without padding, as callback URLs carry it.
    public static func encodeURLSafe(_ bytes: [UInt8]) -> String {
        encode(bytes, alphabet: urlSafeAlphabet, padded: false)
    }

    private static let urlSafeAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let urlSafeDecodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in urlSafeAlphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    /// Strict URL-safe base64 without padding; nil for any other character, and for a
    /// last character whose unused low bits are not zero: each byte string has exactly
    /// one spelling, so a URL cannot be altered into another that opens the same way.
    public static func decodeURLSafe(_ text: String) -> [UInt8]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable(decodeURLSafe) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer(decodeURLSafe)
    }

    private static func decodeURLSafe(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 3 / 4)
        var index = 0
        var value: UInt32 = 0
        while index < text.count {
            let sextet = urlSafeDecodeTable[Int(text[index])]
            guard sextet != 0xFF else { return nil }
            value = value << 6 | UInt32(sextet)
            index += 1
            if index % 4 == 0 {
                out.append(UInt8(truncatingIfNeeded: value >> 16))
                out.append(UInt8(truncatingIfNeeded: value >> 8))
                out.append(UInt8(truncatingIfNeeded: value))
                value = 0
            }
        }
        switch text.count % 4 {
        case 2:  // 12 bits: one byte and four unused bits, which must be zero
            guard value & 0x0F == 0 else { return nil }
            out.append(UInt8(truncatingIfNeeded: value >> 4))
        case 3:  // 18 bits: two bytes and two unused bits
            guard value & 0x03 == 0 else { return nil }
            out.append(UInt8(truncatingIfNeeded: value >> 10))
            out.append(UInt8(truncatingIfNeeded: value >> 2))
        default:
            break
        }
        return out
    }
}
