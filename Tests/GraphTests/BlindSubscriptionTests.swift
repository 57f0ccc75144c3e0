import ENSTestSupport
import Codecs
import Foundation
@testable import ENSModel
@testable import Graph
@testable import MailBackends
import OpenSSL
import Testing

/// The registration side of `blind`: which certificates ENS accepts (made by the
/// openssl CLI) and the rich subscription's resource.
@Suite struct BlindSubscriptionTests {
    static func pem(in directory: URL, key: String, days: Int) throws -> String {
        let path = directory.appendingPathComponent("c-\(UUID().uuidString.prefix(6)).pem").path
        return try Shell.run("""
            openssl req -x509 -newkey "$1" -nodes -keyout "$2.key" -subj /CN=device -days "$3" -out "$2" 2>/dev/null && cat "$2"
            """, [key, path, String(days)])
    }

    func reason(_ text: String) -> String? {
        do throws(BlindSubscriptions.Unusable) {
            try BlindSubscriptions.check(try BlindSubscriptions.certificate(from: text), now: .now())
            return nil
        } catch {
            return error.description
        }
    }

    @Test func acceptsRSACertificatesInBothFormsAndSaysWhatIsWrongWithOthers() throws {
        try withTemporaryDirectory { directory in
            let pem = try Self.pem(in: directory, key: "rsa:2048", days: 30)
            #expect(reason(pem) == nil)
            let base64 = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            #expect(reason(base64) == nil)
            #expect(try BlindSubscriptions.certificate(from: pem) == BlindSubscriptions.certificate(from: base64))
            #expect(reason(try Self.pem(in: directory, key: "rsa:1024", days: 30))?.contains("1024-bit") == true)
            #expect(reason(try Self.pem(in: directory, key: "rsa:4096", days: 30)) == nil)
            let ec = try Shell.run("""
                openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -subj /CN=device -days 30 -out "$1" \
                2>/dev/null && cat "$1"
                """, [directory.appendingPathComponent("ec.pem").path])
            #expect(reason(ec)?.contains("RSA") == true)
            #expect(reason(try Self.pem(in: directory, key: "rsa:2048", days: 1))?.contains("expire") == true,
                    "a day is too short to be worth a subscription")
            #expect(reason("bm90IGEgY2VydGlmaWNhdGU=")?.contains("X.509") == true)
        }
    }

    @Test func eachCertificateOfAMailboxGetsItsOwnResource() {
        let resources = (0..<BlindSubscriptions.maximumPerRecord).map {
            BlindSubscriptions.resource(userPath: "users/u1", selected: BlindSubscriptions.ordering($0))
        }
        #expect(Set(resources).count == BlindSubscriptions.maximumPerRecord)
        #expect(resources[0] == "users/u1/mailFolders('inbox')/messages?$select=subject,from,receivedDateTime,importance,hasAttachments")
        for (index, resource) in resources.enumerated() {
            #expect(Set(BlindSubscriptions.selection(of: resource)) == Set(RichNotifications.blindProperties))
            #expect(BlindSubscriptions.selection(of: resource) == BlindSubscriptions.ordering(index))
        }
    }
}
