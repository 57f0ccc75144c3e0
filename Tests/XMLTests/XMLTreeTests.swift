import ENSTestSupport
import Testing
import XML

/// The XML front door: namespace-aware parsing, and refusal of everything hostile
/// (DTDs, external entities, entity expansion, depth, size, attribute floods, other
/// encodings, garbage).
@Suite struct XMLTreeTests {
    @Test func parsesNamespacesByURINotPrefix() throws {
        let a = try XMLTree.parse(Array(#"<x:a xmlns:x="urn:one"><x:b k="v">text</x:b></x:a>"#.utf8))
        let b = try XMLTree.parse(Array(#"<a xmlns="urn:one"><b k="v">text</b></a>"#.utf8))
        for root in [a, b] {
            #expect(root.namespace == "urn:one" && root.name == "a")
            #expect(root.child("urn:one", "b")?.trimmedText == "text")
            #expect(root.child("urn:one", "b")?.attributes["k"] == "v")
            #expect(root.child("urn:two", "b") == nil)
        }
    }

    @Test func refusesExternalEntities() {
        let xxe = """
            <?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>
            """
        #expect(throws: XMLTreeError.documentTypeDeclaration) { try XMLTree.parse(Array(xxe.utf8)) }
    }

    @Test func refusesBillionLaughs() {
        var doc = #"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">"#
        for level in 1...9 { doc += "<!ENTITY lol\(level) \"" + String(repeating: "&lol\(level == 1 ? "" : String(level - 1));", count: 10) + "\">" }
        doc += "]><lolz>&lol9;</lolz>"
        #expect(throws: XMLTreeError.documentTypeDeclaration) { try XMLTree.parse(Array(doc.utf8)) }
    }

    @Test func refusesDoctypeInAnyCase() {
        #expect(throws: XMLTreeError.documentTypeDeclaration) { try XMLTree.parse(Array("<!doctype r><r/>".utf8)) }
    }

    /// SOAP allows no processing instructions (and Foundation's XMLParser crashed on `<?a?>`).
    @Test func refusesProcessingInstructions() throws {
        for text in ["<?a?>", "<r><?a?></r>", "<?xml version=\"1.0\"?><r><?pi data?></r>", " <?xml version=\"1.0\"?><r/>"] {
            #expect(throws: XMLTreeError.processingInstruction) { try XMLTree.parse(Array(text.utf8)) }
        }
        _ = try XMLTree.parse(Array("<?xml version=\"1.0\" encoding=\"utf-8\"?><r/>".utf8))
    }

    @Test func refusesDeepNesting() {
        let deep = String(repeating: "<a>", count: 100) + String(repeating: "</a>", count: 100)
        #expect(throws: XMLTreeError.tooDeep(limit: 32)) { try XMLTree.parse(Array(deep.utf8)) }
    }

    @Test func refusesOversizeDocuments() {
        let big = [UInt8]("<a>".utf8) + [UInt8](repeating: 0x41, count: 2_000_000) + [UInt8]("</a>".utf8)
        #expect(throws: XMLTreeError.tooLarge(limit: 1_048_576)) { try XMLTree.parse(big) }
    }

    @Test func refusesTooManyElements() {
        let many = "<a>" + String(repeating: "<b/>", count: 30_000) + "</a>"
        #expect(throws: XMLTreeError.tooManyElements(limit: 20_000)) { try XMLTree.parse(Array(many.utf8)) }
    }

    @Test func refusesOtherEncodings() throws {
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse([0xFF, 0xFE, 0x3C, 0x00, 0x61, 0x00]) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse(Array(#"<?xml version="1.0" encoding="ISO-8859-1"?><a/>"#.utf8)) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse([0x3C, 0x61, 0xC3, 0x28, 0x2F, 0x3E]) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse(Array("<?xml version='1.0' ENCODING = 'latin1'?><a/>".utf8)) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse(Array("<a>\u{0}</a>".utf8)) }
        for declaration in [#"<?xml version="1.0" encoding="UTF-8"?>"#, "<?xml version='1.0' encoding='utf8'?>", #"<?xml version="1.0"?>"#] {
            #expect(try XMLTree.parse(Array((declaration + "<a>é</a>").utf8)).text == "é")
        }
    }

    @Test func refusesTruncatedAndGarbage() {
        for text in ["<a><b></a>", "<a>", "", "not xml at all", "<a></b>", "<a xmlns:x='u'><y:b/></a>"] {
            #expect(throws: XMLTreeError.self) { try XMLTree.parse(Array(text.utf8)) }
        }
    }

    @Test func randomBytesNeverCrash() {
        var random = SeededGenerator(seed: 42)
        let fragments = ["<", ">", "</", "/>", "a", "xmlns:s=\"u\"", "s:", "&amp;", "&#x0;",
                         "<![CDATA[", "]]>", "<?", "?>", "\"", "=", " ", "<!--", "-->"]
        for _ in 0..<2000 {
            let count = Int.random(in: 0...40, using: &random)
            let text = (0..<count).map { _ in fragments.randomElement(using: &random)! }.joined()
            _ = try? XMLTree.parse(Array(text.utf8))
        }
        for _ in 0..<500 {
            _ = try? XMLTree.parse(random.bytes(Int.random(in: 0...300, using: &random)))
        }
    }

    @Test func malformedNamesTheLineOfLibxml2sFirstError() {
        #expect(throws: XMLTreeError.malformed(line: 3)) { try XMLTree.parse(Array("<a>\n<b>\n</c>\n</a>".utf8)) }
        #expect(throws: XMLTreeError.malformed(line: 2)) { try XMLTree.parse(Array("<a>\n<b x='1' x='2'/></a>".utf8)) }
        #expect(throws: XMLTreeError.malformed(line: 1)) { try XMLTree.parse(Array("not xml at all".utf8)) }
    }

    /// Descriptions go to the log: they never quote the document.
    @Test func errorsNeverQuoteTheDocument() {
        for text in ["<a>secret-value</b>", "<secret-value", "<a>&secret-value;</a>", "<a xmlns:x='u'><secret-value:b/></a>"] {
            do {
                _ = try XMLTree.parse(Array(text.utf8))
                Issue.record("parsed: \(text)")
            } catch {
                #expect(!error.description.contains("secret"))
            }
        }
    }

    @Test func decodesEntityAndCharacterReferences() throws {
        let root = try XMLTree.parse(Array(#"<a v="&amp;&lt;&#x41;&#38;&quot;&#x26;">&amp;&lt;&#x41;&gt;&quot;&apos;&#233;</a>"#.utf8))
        #expect(root.text == #"&<A>"'é"#)
        #expect(root.attributes["v"] == #"&<A&"&"#)
    }

    /// Only the five predefined entities exist without a DTD.
    @Test func refusesUndefinedEntities() {
        #expect(throws: XMLTreeError.malformed(line: 1)) { try XMLTree.parse(Array("<a>&foo;</a>".utf8)) }
        #expect(throws: XMLTreeError.malformed(line: 2)) { try XMLTree.parse(Array("<a>\n<b v='&foo;'/></a>".utf8)) }
    }

    @Test func cdataSectionsAreText() throws {
        // `]]>` cannot be inside one section: it is split across two.
        let root = try XMLTree.parse(Array("<a>x<![CDATA[<b>&amp; ]]]]><![CDATA[>]]>y</a>".utf8))
        #expect(root.text == "x<b>&amp; ]]>y")
        #expect(root.children.isEmpty)
    }

    @Test func namespacesAndAttributes() throws {
        let document = """
            <s:Envelope xmlns:s="urn:soap" xmlns="urn:default" xmlns:t="urn:types">
              <Item t:Id="prefixed" Id="plain" ChangeKey="ck"><t:Name>n</t:Name><Inner xmlns=""><Bare/></Inner></Item>
              <x:Item xmlns:x="urn:default"/>
            </s:Envelope>
            """
        let root = try XMLTree.parse(Array(document.utf8))
        #expect(root.namespace == "urn:soap" && root.name == "Envelope")
        #expect(root.attributes.isEmpty)
        let items = root.children("urn:default", "Item")
        #expect(items.count == 2)
        let item = try #require(items.first)
        #expect(item.attributes == ["Id": "plain", "t:Id": "prefixed", "ChangeKey": "ck"])
        #expect(item.child("urn:types", "Name")?.text == "n")
        #expect(item.path("", "Inner", "Bare") != nil)
        #expect(item.child("urn:default", "Inner") == nil)
        #expect(root.descendants("", "Bare").count == 1)
    }

    @Test func trimsUnicodeWhitespace() throws {
        let root = try XMLTree.parse(Array("<a>\r\n\t\u{A0}\u{2028} in  side \u{3000}\n</a>".utf8))
        #expect(root.trimmedText == "in  side")
        #expect(try XMLTree.parse(Array("<a> \n </a>".utf8)).trimmedText == "")
        // Only an ASCII start and end that are not white space skip the Unicode trim.
        #expect(try XMLTree.parse(Array("<a>\u{A0}x y\u{2009}</a>".utf8)).trimmedText == "x y")
        #expect(try XMLTree.parse(Array("<a>x\u{A0}</a>".utf8)).trimmedText == "x")
        #expect(try XMLTree.parse(Array("<a>é x\t</a>".utf8)).trimmedText == "é x")
        #expect(try XMLTree.parse(Array("<a>x  y</a>".utf8)).trimmedText == "x  y")
    }

    @Test func textUpToTheByteLimit() throws {
        let text = String(repeating: "0123456789", count: 104_000)
        let root = try XMLTree.parse(Array("<a>\(text)</a>".utf8))
        #expect(root.text.utf8.count == 1_040_000)
        #expect(throws: XMLTreeError.tooLarge(limit: 1_000)) {
            try XMLTree.parse(Array("<a>\(text.prefix(1_000))</a>".utf8), limits: XMLTree.Limits(maximumBytes: 1_000))
        }
    }

    /// libxml2 2.9 compares every attribute of a tag with every other one (100,000 of
    /// them took 3.6 s), so a tag with too many is refused before libxml2 sees it.
    @Test func refusesAttributeFloods() throws {
        func tag(_ count: Int, _ attribute: (Int) -> String) -> [UInt8] {
            Array(("<a " + (0..<count).map(attribute).joined(separator: " ") + "/>").utf8)
        }
        #expect(try XMLTree.parse(tag(128) { "a\($0)='='" }).attributes.count == 128)
        #expect(throws: XMLTreeError.tooManyAttributes(limit: 128)) { try XMLTree.parse(tag(129) { "a\($0)=''" }) }
        #expect(throws: XMLTreeError.tooManyAttributes(limit: 128)) { try XMLTree.parse(tag(100_000) { "a\($0)=''" }) }
        #expect(throws: XMLTreeError.tooManyAttributes(limit: 128)) { try XMLTree.parse(tag(65) { "xmlns:p\($0)='u' p\($0):x=''" }) }
        // Markup inside comments and CDATA sections is text, not a tag.
        let inText = "<a><![CDATA[<b " + String(repeating: "x=1 ", count: 200) + "]]><!-- <c " + String(repeating: "y=2 ", count: 200) + "--></a>"
        #expect(try XMLTree.parse(Array(inText.utf8)).children.isEmpty)
    }

    @Test func concurrentParsesAgree() async throws {
        let document = Array(Fixtures.exchangeOnlineSendNotification.utf8)
        let counts = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    var parsed = 0
                    for _ in 0..<300 where (try? XMLTree.parse(document))?.name == "Envelope" { parsed += 1 }
                    return parsed
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(counts == [300, 300, 300, 300])
    }
}
