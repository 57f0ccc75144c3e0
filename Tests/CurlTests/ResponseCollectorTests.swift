import Testing
@testable import Curl

@Suite struct ResponseCollectorTests {
    @Test func headerValuesLoseTheWhiteSpaceAroundThem() {
        let collector = ResponseCollector()
        for line in ["HTTP/1.1 200 OK\r\n", "Content-Type: text/xml; charset=utf-8\r\n", "X-Spaced: \t padded value \t\r\n",
                     "X-Empty:\r\n", "X-Unicode: \u{A0}wide\u{3000}\r\n", "X-Bare:v\n", "not a header\r\n"] {
            collector.addHeaderLine(Array(line.utf8))
        }
        #expect(collector.headers.map(\.0) == ["Content-Type", "X-Spaced", "X-Empty", "X-Unicode", "X-Bare"])
        #expect(collector.headers.map(\.1) == ["text/xml; charset=utf-8", "padded value", "", "wide", "v"])
        // A new status line (a redirect, a 100-continue) starts the headers again.
        collector.addHeaderLine(Array("HTTP/1.1 302 Found\r\n".utf8))
        #expect(collector.headers.isEmpty)
    }
}
