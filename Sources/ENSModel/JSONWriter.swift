/// Writes compact JSON objects: our responses are flat objects of strings and integers,
/// so a small writer is faster than an encoder and never emits anything unexpected.
public struct JSONObjectWriter: Sendable {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    public init() {}

    public mutating func add(_ key: String, _ value: String) {
        separator()
        Self.appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Self.appendString(value, to: &bytes)
    }

    public mutating func add(_ key: String, _ value: Int) {
        separator()
        Self.appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Adds an already-encoded JSON value (an object or array built by another writer).
    public mutating func add(_ key: String, rawJSON: [UInt8]) {
        separator()
        Self.appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        bytes.append(contentsOf: rawJSON)
    }

    public func finished() -> [UInt8] {
        bytes + [UInt8(ascii: "}")]
    }

    private mutating func separator() {
        if first { first = false } else { bytes.append(UInt8(ascii: ",")) }
    }

    /// Appends `value` as a JSON string, escaping quotes, backslashes and control
    /// characters.
    public static func appendString(_ value: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [0x5c, 0x22])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [0x5c, 0x5c])
            case 0x0a: bytes.append(contentsOf: [0x5c, UInt8(ascii: "n")])
            case 0x0d: bytes.append(contentsOf: [0x5c, UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [0x5c, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5c, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xf)]])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
