import ENSHTTP
import ENSTestSupport
import Testing
@testable import ENSResponder
@testable import MailBackends

@Suite struct ParameterDecoderTests {
    private func decode(_ text: String, json: Bool = true) throws(APIError) -> Parameters {
        try ParameterDecoder.decode(Array(text.utf8), json: json)
    }

    /// The refusal for `text`, or nil (and a recorded issue) when it was accepted.
    @discardableResult
    private func refusal(_ bytes: [UInt8], json: Bool = true, sourceLocation: SourceLocation = #_sourceLocation) -> APIError? {
        do {
            let parameters = try ParameterDecoder.decode(bytes, json: json)
            Issue.record("expected a refusal, got \(parameters.values)", sourceLocation: sourceLocation)
            return nil
        } catch {
            #expect(error.response.status == 400, sourceLocation: sourceLocation)
            return error
        }
    }

    @discardableResult
    private func refusal(_ text: String, json: Bool = true, sourceLocation: SourceLocation = #_sourceLocation) -> APIError? {
        refusal(Array(text.utf8), json: json, sourceLocation: sourceLocation)
    }

    @Test func jsonScalars() throws {
        let parameters = try decode(#"{"s":"text","i":12,"neg":-3,"f":1.50,"e":1e3,"t":true,"no":false,"z":null,"empty":""}"#)
        #expect(parameters.values == ["s": "text", "i": "12", "neg": "-3", "f": "1.50", "e": "1e3", "t": "1", "no": "0", "empty": ""])
        #expect(parameters["z"] == nil, "null is the same as absent")
    }

    @Test func numbersAsTextOrNumber() throws {
        #expect(try decode(#"{"badge":1}"#) == decode(#"{"badge":"1"}"#))
        #expect(try decode(#"{"badge":7}"#).integer("badge") == 7)
        #expect(try decode(#"{"n":123456789012345678901234567890}"#)["n"] == "123456789012345678901234567890")
    }

    @Test func emptyObject() throws {
        #expect(try decode("{}") == Parameters())
        #expect(try decode(" \n{ }\n ") == Parameters())
    }

    @Test func unicodeValuesAndNames() throws {
        let parameters = try decode(#"{"name":"Zo\u00eb 😀","clé":"v"}"#)
        #expect(parameters["name"] == "Zoë 😀")
        #expect(parameters["clé"] == "v")
    }

    @Test(arguments: [#"{"a":[]}"#, #"{"a":[1]}"#, #"{"a":{}}"#, #"{"a":{"b":"c"}}"#, #"{"ok":"1","a":["x"]}"#])
    func nestedValuesAreRefused(text: String) {
        let error = refusal(text)
        #expect(error?.reason.contains("must be a string or a number") == true)
    }

    @Test(arguments: ["[]", #"["a"]"#, #""text""#, "1", "true", "null"])
    func nonObjectBodiesAreRefused(text: String) {
        let error = refusal(text)
        #expect(error?.reason == "The JSON body must be an object.")
    }

    @Test(arguments: ["", "{", #"{"a":1,}"#, #"{"a":1}x"#, #"{"a":1,"a":2}"#, #"{"a":"\ud800"}"#, "{'a':1}", #"{"a":01}"#])
    func malformedJSONIsRefused(text: String) {
        let error = refusal(text)
        #expect(error?.reason.hasPrefix("Malformed JSON body: ") == true)
    }

    @Test func nulIsRefused() {
        #expect(refusal(#"{"a":"x\u0000y"}"#)?.reason == "A parameter contains a NUL byte.")
        #expect(refusal(#"{"\u0000":"x"}"#)?.reason == "A parameter contains a NUL byte.")
        #expect(refusal(#"{"a\u0000b":1}"#)?.reason == "A parameter contains a NUL byte.")
        // A raw NUL is a control character: refused by the JSON parser itself.
        #expect(refusal(Array(#"{"a":"x"#.utf8) + [0] + Array(#""}"#.utf8)) != nil)
        #expect(refusal("a=%00", json: false) != nil)
    }

    @Test func invalidUTF8IsRefused() {
        #expect(refusal(Array(#"{"a":""#.utf8) + [0xFF] + Array(#""}"#.utf8)) != nil)
        #expect(refusal(Array("a=".utf8) + [0xFF], json: false) != nil)
    }

    @Test func deepNestingIsRefusedWithoutCrashing() {
        refusal(String(repeating: "[", count: 10_000))
        refusal("{\"a\":" + String(repeating: "[", count: 10_000))
    }

    @Test func errorsDoNotEchoValues() {
        let secret = "p4ssw0rd-secret"
        for text in [#"{"password":"\#(secret)"#, #"{"password":["\#(secret)"]}"#, #"{"password":"\#(secret)","password":"x"}"#] {
            if let error = refusal(text) {
                #expect(!error.reason.contains(secret))
                #expect(!String(decoding: error.response.body, as: UTF8.self).contains(secret))
            }
        }
        if let error = refusal("password=\(secret)&password=again", json: false) {
            #expect(!error.reason.contains(secret))
            #expect(!String(decoding: error.response.body, as: UTF8.self).contains(secret))
        }
    }

    @Test func longNamesAreTruncatedInMessages() {
        let name = String(repeating: "n", count: 500)
        let error = refusal(#"{"\#(name)":[]}"#)
        #expect(error?.reason.contains(String(repeating: "n", count: 40)) == true)
        #expect(error?.reason.contains(String(repeating: "n", count: 41)) == false)
    }

    @Test func formBodies() throws {
        #expect(try decode("email=ann%40example.com&badge=1&sig=a+b", json: false).values
            == ["email": "ann@example.com", "badge": "1", "sig": "a b"])
        #expect(try decode("", json: false) == Parameters())
        #expect(refusal("a=%zz", json: false)?.reason.hasPrefix("Malformed form body: ") == true)
        #expect(refusal("a=1&a=2", json: false)?.reason.hasPrefix("Malformed form body: ") == true)
        // A JSON text sent as a form is just a strange field name.
        #expect(try decode(#"{"a":1}"#, json: false).values == [#"{"a":1}"#: ""])
    }
}
