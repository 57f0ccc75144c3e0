internal import Codecs

/// Decodes `application/x-www-form-urlencoded` bodies (WHATWG rules: `&`-separated
/// pairs, `+` is a space, `%XX` escapes). Refuses malformed escapes, non-UTF-8 text,
/// NUL bytes and repeated names.
public enum FormDecoder {
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    public static func decode(_ body: [UInt8]) throws(Failure) -> [String: String] {
        var result: [String: String] = [:]
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = try text(percentDecode(parts[0]))
            let value = parts.count > 1 ? try text(percentDecode(parts[1])) : ""
            guard !name.isEmpty else { throw Failure(problem: "a form field has no name") }
            guard result[name] == nil else { throw Failure(problem: "parameter '\(name.prefix(40))' is given more than once") }
            result[name] = value
        }
        return result
    }

    static func percentDecode(_ bytes: ArraySlice<UInt8>) throws(Failure) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
                index += 1
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                      let high = Hex.nibble(bytes[index + 1]), let low = Hex.nibble(bytes[index + 2]) else {
                    throw Failure(problem: "malformed percent escape")
                }
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(byte)
                index += 1
            }
        }
        return output
    }

    private static func text(_ bytes: [UInt8]) throws(Failure) -> String {
        guard !bytes.contains(0) else { throw Failure(problem: "a parameter contains a NUL byte") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw Failure(problem: "a parameter is not valid UTF-8") }
        return text
    }
}
