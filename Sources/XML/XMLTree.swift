#if canImport(Glibc)
private import Glibc
#endif
/// One element of a parsed XML document: expanded name (namespace URI + local name),
/// attributes, text and children. Everything EWS sends is small, so a tree is simpler
/// than streaming and the limits below keep it small.
public struct XMLTreeElement: Sendable {
    public let namespace: String
    public let name: String
    /// Keyed by the attribute's name as written: `Id` for an unprefixed attribute (in no
    /// namespace, whatever the default namespace), `prefix:local` for a prefixed one.
    /// Namespace declarations are not attributes here.
    public let attributes: [String: String]
    public internal(set) var text: String
    public internal(set) var children: [XMLTreeElement]

    /// The first child with this namespace and local name.
    public func child(_ namespace: String, _ name: String) -> XMLTreeElement? {
        children.first { $0.name == name && $0.namespace == namespace }
    }

    public func children(_ namespace: String, _ name: String) -> [XMLTreeElement] {
        children.filter { $0.name == name && $0.namespace == namespace }
    }

    /// Follows a path of children in one namespace.
    public func path(_ namespace: String, _ names: String...) -> XMLTreeElement? {
        var element: XMLTreeElement? = self
        for name in names { element = element?.child(namespace, name) }
        return element
    }

    /// The text without leading and trailing Unicode white space (the White_Space
    /// property: the same set as Foundation's `.whitespacesAndNewlines`).
    public var trimmedText: String {
        // Most texts (ids, flags, names) start and end with ASCII that is not white
        // space, and need no Unicode property lookups to say so.
        func plainASCII(_ byte: UInt8?) -> Bool { byte.map { $0 > 0x20 && $0 < 0x80 } ?? false }
        if plainASCII(text.utf8.first) && plainASCII(text.utf8.last) { return text }
        let scalars = text.unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }

    /// Every descendant (depth first) with this namespace and local name.
    public func descendants(_ namespace: String, _ name: String) -> [XMLTreeElement] {
        var found: [XMLTreeElement] = []
        for child in children {
            if child.namespace == namespace && child.name == name { found.append(child) }
            found += child.descendants(namespace, name)
        }
        return found
    }
}

/// Why a document was refused. The descriptions are log-safe: they never quote input.
public enum XMLTreeError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLarge(limit: Int)
    case documentTypeDeclaration
    case processingInstruction
    case notUTF8
    case tooDeep(limit: Int)
    case tooManyElements(limit: Int)
    case tooManyAttributes(limit: Int)
    case malformed(line: Int)

    public var description: String {
        switch self {
        case .tooLarge(let limit): "XML document over \(limit) bytes"
        case .documentTypeDeclaration: "XML document carries a DOCTYPE or ENTITY declaration (refused: no DTDs in SOAP)"
        case .processingInstruction: "XML document carries a processing instruction (refused: none in SOAP)"
        case .notUTF8: "XML document is not UTF-8"
        case .tooDeep(let limit): "XML nesting deeper than \(limit)"
        case .tooManyElements(let limit): "XML document has more than \(limit) elements"
        case .tooManyAttributes(let limit): "XML element has more than \(limit) attributes and namespace declarations"
        case .malformed(let line): "malformed XML near line \(line)"
        }
    }
}

/// Parses XML with libxml2's SAX2 parser (see SAXTreeBuilder), namespace-aware, with
/// hard limits, and without any DTD processing: SOAP forbids DTDs (SOAP 1.1 §3), so a
/// document that declares one — the carrier of external entities and "billion laughs"
/// entity expansion — is refused before the parser sees it, and the parser is told
/// neither to load external entities nor to touch the network either.
public enum XMLTree {
    public struct Limits: Sendable {
        public var maximumBytes: Int
        public var maximumDepth: Int
        public var maximumElements: Int
        /// Per start tag, namespace declarations included. libxml2 2.9 compares each
        /// attribute of a tag with every other one: 100,000 attributes (under 1 MB) took
        /// it 3.6 s, so a tag with more than this is refused before it is parsed.
        public var maximumAttributes: Int

        public init(maximumBytes: Int = 1_048_576, maximumDepth: Int = 32, maximumElements: Int = 20_000,
                    maximumAttributes: Int = 128) {
            self.maximumBytes = maximumBytes
            self.maximumDepth = maximumDepth
            self.maximumElements = maximumElements
            self.maximumAttributes = maximumAttributes
        }
    }

    public static func parse(_ bytes: [UInt8], limits: Limits = Limits()) throws(XMLTreeError) -> XMLTreeElement {
        guard bytes.count <= limits.maximumBytes else { throw .tooLarge(limit: limits.maximumBytes) }
        try screen(bytes)
        try countAttributes(bytes, limit: limits.maximumAttributes)
        return try SAXTreeBuilder.parse(bytes, limits: limits)
    }

    /// Refuses what must never reach the parser: DTDs and entity declarations anywhere;
    /// processing instructions other than the leading XML declaration (SOAP allows
    /// none); encodings other than UTF-8 (a UTF-16 document would slip past the byte
    /// scan).
    static func screen(_ bytes: [UInt8]) throws(XMLTreeError) {
        if bytes.starts(with: [0xFE, 0xFF]) || bytes.starts(with: [0xFF, 0xFE]) { throw .notUTF8 }
        // No allocation and no generic search: every callback and every lookup answer
        // goes through here.
        guard (try? UTF8Span(validating: bytes.span)) != nil else { throw .notUTF8 }
        try bytes.withUnsafeBufferPointer { (bytes) throws(XMLTreeError) in
            guard let base = bytes.baseAddress else { return }
            if memchr(base, 0, bytes.count) != nil { throw .notUTF8 }
            // From one `<` to the next with memchr (vectorised), not byte by byte.
            var index = 0
            while index < bytes.count - 1 {
                guard let found = memchr(base + index, Int32(UInt8(ascii: "<")), bytes.count - 1 - index) else { break }
                index = UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
                switch bytes[index + 1] {
                case UInt8(ascii: "?"):
                    guard index == 0, matches(bytes, at: 0, "<?xml ") else { throw .processingInstruction }
                    try screenDeclaration(bytes)
                case UInt8(ascii: "!"):
                    if matches(bytes, at: index, "<!DOCTYPE", caseInsensitive: true) || matches(bytes, at: index, "<!ENTITY", caseInsensitive: true) {
                        throw .documentTypeDeclaration
                    }
                default:
                    break
                }
                index += 1
            }
        }
    }

    /// The leading declaration's encoding, if it names one, must be UTF-8.
    private static func screenDeclaration(_ bytes: UnsafeBufferPointer<UInt8>) throws(XMLTreeError) {
        guard let end = bytes.firstIndex(of: UInt8(ascii: ">")) else { return }
        var index = 0
        while index < end {
            if matches(bytes, at: index, "encoding", caseInsensitive: true) {
                index += 8
                while index < end, bytes[index] == 0x20 || bytes[index] == 0x3D || bytes[index] == 0x22 || bytes[index] == 0x27 { index += 1 }
                guard matches(bytes, at: index, "utf-8", caseInsensitive: true) || matches(bytes, at: index, "utf8", caseInsensitive: true) else {
                    throw .notUTF8
                }
                return
            }
            index += 1
        }
    }

    /// Whether `bytes` holds the ASCII `text` at `index` (letters in either case when
    /// `caseInsensitive`).
    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int, _ text: StaticString, caseInsensitive: Bool = false) -> Bool {
        guard index + text.utf8CodeUnitCount <= bytes.count else { return false }
        for offset in 0..<text.utf8CodeUnitCount {
            let expected = text.utf8Start[offset]
            let byte = bytes[index + offset]
            guard byte == expected || (caseInsensitive && asciiLower(byte) == asciiLower(expected)) else { return false }
        }
        return true
    }

    /// Refuses a start tag with more than `limit` attributes and namespace declarations
    /// (each has one `=` outside quotes) before libxml2 spends quadratic time on it.
    /// Comments and CDATA sections are skipped: a `<` in them opens no tag.
    static func countAttributes(_ bytes: [UInt8], limit: Int) throws(XMLTreeError) {
        try bytes.withUnsafeBufferPointer { (bytes) throws(XMLTreeError) in try countAttributes(bytes, limit: limit) }
    }

    private static func countAttributes(_ bytes: UnsafeBufferPointer<UInt8>, limit: Int) throws(XMLTreeError) {
        var index = 0
        while index < bytes.count, let base = bytes.baseAddress,
              let found = memchr(base + index, Int32(UInt8(ascii: "<")), bytes.count - index) {
            let open = UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
            if let close: StaticString = matches(bytes, at: open, "<!--") ? "-->" : matches(bytes, at: open, "<![CDATA[") ? "]]>" : nil {
                var end = open + 4
                while end < bytes.count, !matches(bytes, at: end, close) { end += 1 }
                guard end < bytes.count else { return }
                index = end + close.utf8CodeUnitCount
                continue
            }
            var count = 0
            var quote: UInt8?
            index = open + 1
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                if let open = quote {
                    if byte == open { quote = nil }
                } else if byte == 0x22 || byte == 0x27 {
                    quote = byte
                } else if byte == UInt8(ascii: "=") {
                    count += 1
                    guard count <= limit else { throw .tooManyAttributes(limit: limit) }
                } else if byte == UInt8(ascii: ">") {
                    break
                }
            }
        }
    }

    private static func asciiLower(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte
    }
}
