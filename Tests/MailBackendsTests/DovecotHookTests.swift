import Codecs
import ENSHTTP
import ENSModel
import ENSStore
import ENSTestSupport
import ENSVault
import OpenSSL
import SenderWire
import Testing
@testable import MailBackends

extension OnAThrowawayDatabase {
    /// Dovecot's push hook in process: a registered server's push for a subscribed
    /// record is handed to the sender with what the push carried; a push the sender
    /// refuses is answered 503 and claims nothing, so Dovecot's retry delivers it; the
    /// same push again is handed on once; a wrong credential pushes nothing.
    @Suite struct DovecotHookTests {
        let database = ThrowawayENSDatabase.shared

        @Test func aPushIsHandedOnOnceAndARefusedOneIsLeftForTheRetry() throws {
            let connection = database.connection()
            let name = "mx-\(Hex.encode(try Digest.randomBytes(4)))"
            let server = DovecotServer(name: name, imapURL: "imaps://imap.example.test/", domains: ["example.test"], caPEM: nil, driver: .ox)
            try DovecotServerStore(database: connection, vault: database.vault).save(server, now: .now())
            let record = try SubscribedRecord(database: connection, vault: database.vault, backend: .dovecot, backendURL: server.imapURL,
                                              endpoint: server.endpoint)
            let token = try DovecotRoute(recordID: record.id, generation: record.generation).token(server: name, vault: database.vault)
            let body = #"{"user":"\#(token)","event":"messageNew","folder":"INBOX","imap-uidvalidity":1795932928,"imap-uid":3,"#
                + #""from":"Alice Example <alice@example.net>","subject":"Minutes of Monday","unseen":3}"#
            func push(_ context: RequestContext, secret: String? = nil) throws -> APIResponse {
                let credential = Base64.encode(Array("\(name):\(secret ?? database.vault.dovecotCredential(server: name, serial: 1))".utf8))
                let request = Request(method: "PUT", path: "/dovecot/v1", authorization: "Basic \(credential)", body: Array(body.utf8))
                let route = DovecotHook.route
                context.route(toBucket: route.bucket?(request, context))
                return try route.handler(request, context)
            }
            try withTemporaryDirectory { directory in
                let sender = try StandInSender(directory: directory)
                defer { sender.stop() }
                let context = responderContext(database, sender: sender.path)
                #expect(try push(context, secret: "not-the-credential").status == 401)

                sender.refuse("spool-full")
                let refused = try push(context)
                #expect(refused.status == 503 && refused.extraHeaders.contains { $0 == ("Retry-After", "1") })
                #expect(sender.take().isEmpty)

                sender.refuse(nil)
                #expect(try push(context).status == 204, "the retry finds the message unclaimed")
                let pushed = sender.take()
                #expect(pushed.count == 1 && pushed.first?.deviceRowID == record.devices.first?.id)
                let payload = pushed.first.map { String(decoding: $0.payload, as: UTF8.self) } ?? ""
                #expect(payload.contains("Minutes of Monday") && payload.contains("Alice Example"))

                #expect(try push(context).status == 204)
                #expect(sender.take().isEmpty, "the same push again is not handed on twice")
            }
        }
    }
}
