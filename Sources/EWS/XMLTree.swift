import Foundation
import FoundationXML
import Synchronization

/// swift-corelibs-foundation's XMLParser keeps the current parser in thread-local
/// state and relies on libxml2's global initialisation, and it has crash bugs on
/// unusual input (see `screen`). Documents here are small and a parse takes
/// microseconds, so parses are serialized process-wide: responder threads never run
/// libxml2 concurrently, whatever its thread-safety on a given build.
private let parserLock = Mutex<Void>(())

/// One element of a parsed XML document: expanded name (namespace URI + local name),
/// attributes, text and children. Everything EWS sends is small, so a tree is simpler
/// than streaming and the limits below keep it small.
public struct XMLTreeElement: Sendable {
    public let namespace: String
    public let name: String
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

    public var trimmedText: String {
        text.trimmingCharacters(in: .whitespacesAndNewlines)
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
    case malformed(line: Int)

    public var description: String {
        switch self {
        case .tooLarge(let limit): "XML document over \(limit) bytes"
        case .documentTypeDeclaration: "XML document carries a DOCTYPE or ENTITY declaration (refused: no DTDs in SOAP)"
        case .processingInstruction: "XML document carries a processing instruction (refused: none in SOAP)"
        case .notUTF8: "XML document is not UTF-8"
        case .tooDeep(let limit): "XML nesting deeper than \(limit)"
        case .tooManyElements(let limit): "XML document has more than \(limit) elements"
        case .malformed(let line): "malformed XML near line \(line)"
        }
    }
}

/// Parses XML with FoundationXML's `XMLParser` (libxml2), namespace-aware, with hard
/// limits, and without any DTD processing: SOAP forbids DTDs (SOAP 1.1 §3), so a
/// document that declares one — the carrier of external entities and "billion laughs"
/// entity expansion — is refused before the parser sees it, and the parser is told not
/// to resolve external entities either.
public enum XMLTree {
    public struct Limits: Sendable {
        public var maximumBytes: Int
        public var maximumDepth: Int
        public var maximumElements: Int

        public init(maximumBytes: Int = 1_048_576, maximumDepth: Int = 32, maximumElements: Int = 20_000) {
            self.maximumBytes = maximumBytes
            self.maximumDepth = maximumDepth
            self.maximumElements = maximumElements
        }
    }

    public static func parse(_ bytes: [UInt8], limits: Limits = Limits()) throws(XMLTreeError) -> XMLTreeElement {
        guard bytes.count <= limits.maximumBytes else { throw .tooLarge(limit: limits.maximumBytes) }
        try screen(bytes)
        // Not XML at all (an HTML error page, plain text): refused without the parser,
        // whose error path leaks a little memory per error on Linux (Foundation's
        // XMLParser turns every libxml2 error into a CFString it never frees).
        guard bytes.first(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) == UInt8(ascii: "<") else {
            throw .malformed(line: 1)
        }
        let (root, failure, line): (XMLTreeElement?, XMLTreeError?, Int) = parserLock.withLock { _ in
            let parser = XMLParser(data: Data(bytes))
            parser.shouldProcessNamespaces = true
            parser.shouldReportNamespacePrefixes = false
            parser.shouldResolveExternalEntities = false
            let builder = TreeBuilder(limits: limits, parser: parser)
            parser.delegate = builder
            let finished = parser.parse()
            return (finished ? builder.root : nil, builder.failure, parser.lineNumber)
        }
        if let failure { throw failure }
        guard let root else { throw .malformed(line: line) }
        return root
    }

    /// Refuses what must never reach the parser: DTDs and entity declarations anywhere;
    /// processing instructions other than the leading XML declaration (SOAP allows
    /// none, and XMLParser on Linux crashes on an empty one such as `<?a?>`); encodings
    /// other than UTF-8 (a UTF-16 document would slip past the byte scan).
    static func screen(_ bytes: [UInt8]) throws(XMLTreeError) {
        if bytes.starts(with: [0xFE, 0xFF]) || bytes.starts(with: [0xFF, 0xFE]) || bytes.contains(0) { throw .notUTF8 }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw .notUTF8 }
        let markers = [Array("<!DOCTYPE".utf8), Array("<!ENTITY".utf8)]
        var index = 0
        let declaration = Array("<?xml ".utf8)
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "<"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "?") {
                guard index == 0, bytes.starts(with: declaration) else { throw .processingInstruction }
            }
            if bytes[index] == UInt8(ascii: "<"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "!") {
                for marker in markers where index + marker.count <= bytes.count {
                    if zip(bytes[index..<(index + marker.count)], marker).allSatisfy({ asciiUpper($0) == $1 }) {
                        throw .documentTypeDeclaration
                    }
                }
            }
            index += 1
        }
        if let declarationEnd = bytes.firstIndex(of: UInt8(ascii: ">")), bytes.starts(with: Array("<?xml".utf8)) {
            let declaration = String(decoding: bytes[..<declarationEnd], as: UTF8.self).lowercased()
            if let range = declaration.range(of: "encoding") {
                let value = declaration[range.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\"" || $0 == "'" }
                guard value.hasPrefix("utf-8") || value.hasPrefix("utf8") else { throw .notUTF8 }
            }
        }
    }

    private static func asciiUpper(_ byte: UInt8) -> UInt8 {
        byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
    }
}

/// XMLParser delegate that builds the tree and enforces the limits as it goes.
private final class TreeBuilder: NSObject, XMLParserDelegate {
    let limits: XMLTree.Limits
    unowned let parser: XMLParser
    var stack: [XMLTreeElement] = []
    var root: XMLTreeElement?
    var elementCount = 0
    var failure: XMLTreeError?

    init(limits: XMLTree.Limits, parser: XMLParser) {
        self.limits = limits
        self.parser = parser
    }

    private func fail(_ error: XMLTreeError) {
        if failure == nil { failure = error }
        parser.abortParsing()
    }

    func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        guard failure == nil else { return }
        elementCount += 1
        guard elementCount <= limits.maximumElements else { return fail(.tooManyElements(limit: limits.maximumElements)) }
        guard stack.count < limits.maximumDepth else { return fail(.tooDeep(limit: limits.maximumDepth)) }
        stack.append(XMLTreeElement(namespace: namespaceURI ?? "", name: elementName, attributes: attributes, text: "", children: []))
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard failure == nil, !stack.isEmpty else { return }
        stack[stack.count - 1].text += string
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        guard failure == nil, !stack.isEmpty else { return }
        stack[stack.count - 1].text += String(decoding: CDATABlock, as: UTF8.self)
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
        guard failure == nil, let element = stack.popLast() else { return }
        if stack.isEmpty {
            root = element
        } else {
            stack[stack.count - 1].children.append(element)
        }
    }

    func parser(_ parser: XMLParser, resolveExternalEntityName name: String, systemID: String?) -> Data? {
        fail(.documentTypeDeclaration)
        return nil
    }

    func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
        fail(.documentTypeDeclaration)
    }

    func parser(_ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?) {
        fail(.documentTypeDeclaration)
    }

    func parser(_ parser: XMLParser, parseErrorOccurred parseError: any Error) {
        if failure == nil { failure = .malformed(line: parser.lineNumber) }
    }
}
