internal import CLibXML2

/// libxml2 sets up its global state (the parser's character tables, the thread-local
/// error slots, the dictionary lock) in xmlInitParser, which must run once before
/// threads parse; a global `let` is initialised exactly once, thread-safely.
private let libxml2Initialized: Void = xmlInitParser()

/// Builds an `XMLTreeElement` tree from libxml2's SAX2 events, enforcing the limits as
/// it goes (a limit stops the parser at once). One builder per parse, handed to every
/// callback as the parser context's user data; nothing here is shared between parses.
///
/// No lock around parses: each owns its parser context and dictionary, and what libxml2
/// keeps globally is per thread (shim.h refuses a libxml2 built without threads).
final class SAXTreeBuilder {
    /// No network access. Not XML_PARSE_NOENT (no entity substitution: with DTDs refused
    /// only the five predefined entities and character references exist, and libxml2
    /// decodes those without it, see `start`), nor DTDLOAD/DTDATTR (no external subset
    /// read, no default attributes). XML_PARSE_NO_XXE came with libxml2 2.13; Debian 12
    /// has 2.9.14, where the screen's refusal of DOCTYPE and ENTITY does its work.
    private static let options = Int32(XML_PARSE_NONET.rawValue)

    private let limits: XMLTree.Limits
    private var parser: xmlParserCtxtPtr?
    private var stack: [XMLTreeElement] = []
    private var root: XMLTreeElement?
    private var elementCount = 0
    private var failure: XMLTreeError?
    /// The line of libxml2's first error (not warning): the one that names the problem.
    private var errorLine: Int?
    /// Namespace URIs made into Strings so far. libxml2 hands each element its URI from
    /// the parse's dictionary, the same pointer for the same URI, and a document uses
    /// a handful of (long) URIs on every element.
    private var namespaces: [(pointer: UnsafePointer<xmlChar>, uri: String)] = []

    private init(limits: XMLTree.Limits) {
        self.limits = limits
    }

    static func parse(_ bytes: [UInt8], limits: XMLTree.Limits) throws(XMLTreeError) -> XMLTreeElement {
        _ = libxml2Initialized
        guard let length = Int32(exactly: bytes.count) else { throw .tooLarge(limit: Int(Int32.max)) }
        let builder = SAXTreeBuilder(limits: limits)
        var handler = Self.handler()
        let (code, wellFormed, line) = withExtendedLifetime(builder) { () -> (Int32, Bool, Int) in
            let user = Unmanaged.passUnretained(builder).toOpaque()
            // xmlCreatePushParserCtxt copies the handler; NULL only when out of memory.
            guard let parser = xmlCreatePushParserCtxt(&handler, user, nil, 0, nil) else { return (-1, false, 0) }
            defer { xmlFreeParserCtxt(parser) }
            builder.parser = parser
            defer { builder.parser = nil }
            xmlCtxtUseOptions(parser, options)
            let code = bytes.withUnsafeBytes { xmlParseChunk(parser, $0.baseAddress?.assumingMemoryBound(to: CChar.self), length, 1) }
            let context = parser.pointee
            return (code, context.wellFormed != 0 && context.nsWellFormed != 0, Int(context.input?.pointee.line ?? 0))
        }
        if let failure = builder.failure { throw failure }
        guard code == 0, wellFormed, builder.errorLine == nil, let root = builder.root else {
            throw .malformed(line: builder.errorLine ?? max(line, 1))
        }
        return root
    }

    /// The SAX2 callbacks: elements with their namespaces resolved, text (CDATA sections
    /// and whitespace too), and errors. Everything else (comments, references to entities
    /// of a DTD, which the screen keeps out) is left NULL and so ignored.
    private static func handler() -> xmlSAXHandler {
        var handler = xmlSAXHandler()
        handler.initialized = UInt32(XML_SAX2_MAGIC)
        handler.startElementNs = { user, localName, prefix, uri, _, _, attributeCount, _, attributes in
            guard let builder = SAXTreeBuilder.from(user), let localName else { return }
            builder.start(localName, prefix: prefix, uri: uri,
                          attributes: UnsafeBufferPointer(start: attributes, count: Int(attributeCount) * 5))
        }
        handler.endElementNs = { user, _, _, _ in SAXTreeBuilder.from(user)?.end() }
        let text: charactersSAXFunc = { user, characters, count in
            guard let builder = SAXTreeBuilder.from(user), let characters else { return }
            builder.append(UnsafeBufferPointer(start: characters, count: Int(count)))
        }
        handler.characters = text
        handler.cdataBlock = text
        handler.ignorableWhitespace = text
        // Structured errors, per parser context: nothing is printed to stderr, and the
        // message (which may quote input) is never kept, only the line.
        handler.serror = { _, error in
            guard let error, error.pointee.level.rawValue >= XML_ERR_ERROR.rawValue,
                  let parser = error.pointee.ctxt?.assumingMemoryBound(to: xmlParserCtxt.self),
                  let builder = SAXTreeBuilder.from(parser.pointee.userData) else { return }
            if builder.errorLine == nil { builder.errorLine = max(Int(error.pointee.line), 1) }
        }
        return handler
    }

    private static func from(_ user: UnsafeMutableRawPointer?) -> SAXTreeBuilder? {
        user.map { Unmanaged<SAXTreeBuilder>.fromOpaque($0).takeUnretainedValue() }
    }

    private func stop(_ error: XMLTreeError) {
        if failure == nil { failure = error }
        if let parser { xmlStopParser(parser) }
    }

    /// `attributes` holds five pointers per attribute: local name, prefix, namespace URI,
    /// and the value's start and end (values are not NUL-terminated).
    private func start(_ localName: UnsafePointer<xmlChar>, prefix: UnsafePointer<xmlChar>?, uri: UnsafePointer<xmlChar>?,
                       attributes: UnsafeBufferPointer<UnsafePointer<xmlChar>?>) {
        guard failure == nil else { return }
        elementCount += 1
        guard elementCount <= limits.maximumElements else { return stop(.tooManyElements(limit: limits.maximumElements)) }
        guard stack.count < limits.maximumDepth else { return stop(.tooDeep(limit: limits.maximumDepth)) }
        var values: [String: String] = [:]
        for offset in stride(from: 0, to: attributes.count, by: 5) {
            guard let name = attributes[offset], let value = attributes[offset + 3], let end = attributes[offset + 4] else { continue }
            let key = attributes[offset + 1].map { String(cString: $0) + ":" + String(cString: name) } ?? String(cString: name)
            let raw = UnsafeBufferPointer(start: value, count: end - value)
            // Without XML_PARSE_NOENT libxml2 decodes references in attribute values,
            // except that it writes each `&` (from `&amp;`, `&#38;`, `&#x26;`) as `&#38;`
            // for a later pass; no other `&` can be left (a bare one is an error, and
            // there are no DTD entities), so that pass is this one replacement.
            let text = String(decoding: raw, as: UTF8.self)
            values[key] = raw.contains(UInt8(ascii: "&")) ? text.replacing("&#38;", with: "&") : text
        }
        stack.append(XMLTreeElement(namespace: uri.map(namespace) ?? "", name: String(cString: localName),
                                    attributes: values, text: "", children: []))
    }

    private func namespace(_ pointer: UnsafePointer<xmlChar>) -> String {
        if let known = namespaces.first(where: { $0.pointer == pointer }) { return known.uri }
        let uri = String(cString: pointer)
        namespaces.append((pointer, uri))
        return uri
    }

    private func append(_ characters: UnsafeBufferPointer<xmlChar>) {
        guard failure == nil, !stack.isEmpty else { return }
        stack[stack.count - 1].text += String(decoding: characters, as: UTF8.self)
    }

    private func end() {
        guard failure == nil, let element = stack.popLast() else { return }
        if stack.isEmpty {
            root = element
        } else {
            stack[stack.count - 1].children.append(element)
        }
    }
}
