import Testing
@testable import EWS

/// The XML front door: namespace-aware parsing, and refusal of everything hostile
/// (DTDs, external entities, entity expansion, depth, size, other encodings, garbage).
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

    /// SOAP allows no processing instructions, and XMLParser on Linux crashes on `<?a?>`.
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

    @Test func refusesOtherEncodings() {
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse([0xFF, 0xFE, 0x3C, 0x00, 0x61, 0x00]) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse(Array(#"<?xml version="1.0" encoding="ISO-8859-1"?><a/>"#.utf8)) }
        #expect(throws: XMLTreeError.notUTF8) { try XMLTree.parse([0x3C, 0x61, 0xC3, 0x28, 0x2F, 0x3E]) }
    }

    @Test func refusesTruncatedAndGarbage() {
        for text in ["<a><b></a>", "<a>", "", "not xml at all", "<a></b>", "<a xmlns:x='u'><y:b/></a>"] {
            #expect(throws: XMLTreeError.self) { try XMLTree.parse(Array(text.utf8)) }
        }
    }

    @Test func randomBytesNeverCrash() {
        var random = SeededGenerator(seed: 42)
        let fragments = ["<", ">", "</", "/>", "a", "xmlns:s=\"u\"", "s:", "&amp;", "&#x0;", "<![CDATA[", "]]>", "<?", "?>", "\"", "=", " ", "<!--", "-->"]
        for _ in 0..<2000 {
            let count = Int.random(in: 0...40, using: &random)
            let text = (0..<count).map { _ in fragments.randomElement(using: &random)! }.joined()
            _ = try? XMLTree.parse(Array(text.utf8))
        }
        for _ in 0..<500 {
            _ = try? XMLTree.parse(random.bytes(Int.random(in: 0...300, using: &random)))
        }
    }

    @Test func concurrentParsesAgree() async throws {
        let document = Array(SendNotificationTests.exchangeOnline.utf8)
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
