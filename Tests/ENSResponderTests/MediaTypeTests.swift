import ENSTestSupport
import Testing
@testable import ENSResponder

@Suite struct MediaTypeTests {
    private func mediaType(_ text: String) -> MediaType { MediaType(Array(text.utf8)) }

    @Test func absent() {
        #expect(MediaType([]) == .absent)
    }

    @Test(arguments: [
        "application/json", "APPLICATION/JSON", "Application/Json", "application/json; charset=utf-8",
        "application/json;charset=UTF-8", "application/json ; charset=utf-8", " application/json", "application/json\t",
        "\tapplication/json ;", "application/json;", "application/json; charset=\"utf-8\"; foo=bar",
    ])
    func json(text: String) {
        #expect(mediaType(text) == .json)
    }

    @Test(arguments: [
        "application/x-www-form-urlencoded", "Application/X-WWW-Form-URLEncoded", "application/x-www-form-urlencoded; charset=utf-8",
        "application/x-www-form-urlencoded;charset=ISO-8859-1", "  application/x-www-form-urlencoded  ;  x=y",
    ])
    func form(text: String) {
        #expect(mediaType(text) == .form)
    }

    @Test(arguments: [
        "text/plain", "application/soap+xml", "multipart/form-data; boundary=x", "application/jsonp", "application/json-patch+json",
        "application/problem+json", "application/x-www-form-urlencodedx", "json", "application", "application/", "/json",
        ";", " ", " ;application/json", "application/ json", "application /json", "application/json,text/plain",
        "application/json\u{0}", "\u{0}application/json", "application/json\ncharset=utf-8", "text/json",
    ])
    func other(text: String) {
        #expect(mediaType(text) == .other)
    }

    @Test(arguments: ["text/xml", "text/xml; charset=utf-8", "TEXT/XML;charset=UTF-8", "application/xml"])
    func xml(text: String) {
        #expect(mediaType(text) == .xml)
    }

    @Test func leadingSemicolonHasAnEmptyEssence() {
        #expect(mediaType(";application/json") == .other)
        #expect(mediaType(";application/x-www-form-urlencoded") == .other)
    }

    @Test func invalidUTF8IsOther() {
        #expect(MediaType(Array("application/json".utf8) + [0xFF]) == .other)
        #expect(MediaType([0xC3]) == .other)
    }
}
