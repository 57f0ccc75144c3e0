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
    /// characters. Runs that need no escape are copied whole: responses and pushes are
    /// mostly such runs, and a copy per byte was a visible share of both.
    public static func appendString(_ value: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                runStart = index + 1
                bytes.append(0x5c)
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x0a: bytes.append(UInt8(ascii: "n"))
                case 0x0d: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                default:
                    let hex: StaticString = "0123456789abcdef"
                    bytes.append(UInt8(ascii: "u")); bytes.append(0x30); bytes.append(0x30)
                    bytes.append(hex.utf8Start[Int(byte >> 4)]); bytes.append(hex.utf8Start[Int(byte & 0xf)])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
