import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing
import XML
@testable import ENSModel
@testable import ENSVault
@testable import EWS

/// Callback URLs. Sealed (today's): record, generation and a random key per
/// subscription, sealed; the key, with the master key, opens the credentials stored in
/// the database. Keyed (2026-11-26): the same key beside the record id in clear.
/// Carrying (older subscriptions):
/// the credentials sealed in the URL, opened by this record plus the master key. Any
/// change is detected by the MAC before the database is asked.
@Suite struct CallbackTokenTests {
    static let keyMaterial: [UInt8] = Array(repeating: 7, count: 1200)
    static let credentials = EWSCredentials(method: .basic(userName: "alice", password: "s3cret-Pa55"), mailbox: "alice@example.test")

    static func make(recordID: Int64 = 42, generation: Int64 = 3, vault: Vault? = nil) throws -> (String, Vault) {
        let vault = try vault ?? VaultTests.vault()
        let suffix = try CallbackToken.makeCarrying(payload: CallbackPayload(credentials: credentials).encoded, recordID: recordID,
                                                    generation: generation, recordKeyMaterial: keyMaterial, vault: vault)
        return (suffix, vault)
    }

    @Test func roundTripsAndCarriesNoSecretInClear() throws {
        let (suffix, vault) = try Self.make()
        #expect(suffix.hasPrefix("42/3/"))
        for secret in ["alice", "s3cret", "example.test", Base64.encode(Array("alice:s3cret-Pa55".utf8))] {
            #expect(!suffix.contains(secret))
        }
        // URL-safe: nothing that needs escaping in a path.
        #expect(suffix.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_/".contains($0)) })
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        #expect(token.recordID == 42 && token.generation == 3)
        #expect(try token.credentialSeal(vault: vault) == nil)
        let carried = try token.openCarried(recordKeyMaterial: Self.keyMaterial, vault: vault)
        let payload = try CallbackPayload(encoded: #require(carried))
        #expect(payload.credentials.method == Self.credentials.method)
        #expect(payload.credentials.mailbox == nil)  // Basic needs no mailbox at callback time
    }

    @Test func everyAlteredCharacterIsRefused() throws {
        let (suffix, vault) = try Self.make()
        let characters = Array(suffix)
        for index in characters.indices where characters[index] != "/" {
            var altered = characters
            altered[index] = altered[index] == "A" ? "B" : "A"
            #expect(CallbackToken(path: String(altered), vault: vault) == nil, "altered at \(index)")
        }
    }

    @Test func truncatedForgedAndMovedTokensAreRefused() throws {
        let (suffix, vault) = try Self.make()
        for cut in [1, 2, 10, suffix.count / 2] {
            #expect(CallbackToken(path: String(suffix.dropLast(cut)), vault: vault) == nil)
        }
        let blob = suffix.split(separator: "/")[2]
        #expect(CallbackToken(path: "43/3/\(blob)", vault: vault) == nil)  // another record
        #expect(CallbackToken(path: "42/4/\(blob)", vault: vault) == nil)  // another generation
        #expect(CallbackToken(path: "042/3/\(blob)", vault: vault) == nil)
        #expect(CallbackToken(path: "42/3/\(blob)/", vault: vault) == nil)
        #expect(CallbackToken(path: "", vault: vault) == nil)
        #expect(CallbackToken(path: "1/1/" + String(repeating: "A", count: 100), vault: vault) == nil)
        // Another master key does not accept it.
        #expect(CallbackToken(path: suffix, vault: try VaultTests.vault(VaultTests.otherMasterBytes)) == nil)
    }

    @Test func onlyTheRecordsKeyMaterialOpensIt() throws {
        let (suffix, vault) = try Self.make()
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        var other = Self.keyMaterial
        other[0] ^= 1
        #expect(throws: (any Error).self) { try token.openCarried(recordKeyMaterial: other, vault: vault) }
    }

    // MARK: Keyed URLs

    @Test func aKeyedURLIsShortWhateverTheCredentialsWeigh() throws {
        let vault = try VaultTests.vault()
        let (suffix, seal) = try CallbackToken.makeKeyed(recordID: 9_999_999_999, generation: 4_000_000_000, vault: vault)
        #expect(suffix.hasPrefix("9999999999/4000000000/k."))
        #expect(("https://ens.example.com/ews/" + suffix).utf8.count < 130)
        #expect(suffix.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_/.".contains($0)) })
        // A 10 KB certificate bundle is stored, not carried.
        let identity = ClientIdentity(certificateDER: Array(repeating: 0x30, count: 6000), privateKeyDER: Array(repeating: 0x02, count: 4000))
        let payload = CallbackPayload(credentials: EWSCredentials(method: .certificate(identity), mailbox: nil)).encoded
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        let opened = try #require(try token.credentialSeal(vault: vault)).open(try seal.seal(payload))
        #expect(try CallbackPayload(encoded: opened).credentials.method == .certificate(identity))
        #expect(try token.openCarried(recordKeyMaterial: Self.keyMaterial, vault: vault) == nil)
    }

    /// The stored credentials open only with this subscription's URL and the master key:
    /// not another subscription's URL of the same record, not another generation, not
    /// another master key; and the URL is refused when altered or moved.
    @Test func storedCredentialsOpenOnlyWithTheirOwnURLAndTheMasterKey() throws {
        let vault = try VaultTests.vault()
        let (suffix, seal) = try CallbackToken.makeKeyed(recordID: 42, generation: 3, vault: vault)
        let sealed = try seal.seal(Array("the credentials".utf8))
        let (otherSuffix, _) = try CallbackToken.makeKeyed(recordID: 42, generation: 3, vault: vault)
        let other = try #require(CallbackToken(path: otherSuffix, vault: vault))
        #expect(throws: (any Error).self) { try #require(try other.credentialSeal(vault: vault)).open(sealed) }
        let blob = suffix.split(separator: "/")[2]
        #expect(CallbackToken(path: "43/3/\(blob)", vault: vault) == nil)
        #expect(CallbackToken(path: "42/4/\(blob)", vault: vault) == nil)
        #expect(CallbackToken(path: suffix, vault: try VaultTests.vault(VaultTests.otherMasterBytes)) == nil)
        #expect(CallbackToken(path: "42/3/k." + String(blob.dropFirst(2).dropLast(1)), vault: vault) == nil)
        #expect(CallbackToken(path: "42/3/k.", vault: vault) == nil)
        // The same URL key under another master key derives another seal.
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        guard case .keyed(let urlKey) = token.form else {
            Issue.record("not keyed")
            return
        }
        let foreign = try CredentialSeal(vault: try VaultTests.vault(VaultTests.otherMasterBytes), recordID: 42, generation: 3, urlKey: urlKey)
        #expect(throws: (any Error).self) { try foreign.open(sealed) }
        #expect(try token.credentialSeal(vault: vault)?.open(sealed) == Array("the credentials".utf8))
    }

    @Test func everyAlteredCharacterOfAKeyedURLIsRefused() throws {
        let vault = try VaultTests.vault()
        let (suffix, _) = try CallbackToken.makeKeyed(recordID: 42, generation: 3, vault: vault)
        let characters = Array(suffix)
        for index in characters.indices where characters[index] != "/" {
            var altered = characters
            altered[index] = altered[index] == "A" ? "B" : "A"
            #expect(CallbackToken(path: String(altered), vault: vault) == nil, "altered at \(index)")
        }
    }

    // MARK: Sealed URLs (today's)

    /// Record ids are sequential: a URL that showed one told an outsider which record to
    /// aim forged posts at, and how many records there are. Today's URL shows nothing but
    /// a box that only the master key opens, different for every subscription.
    @Test func aNewURLRevealsNoRecordIDOrGeneration() throws {
        let vault = try VaultTests.vault()
        let (suffix, seal) = try CallbackToken.makeSealed(recordID: 42, generation: 3, vault: vault)
        let (again, _) = try CallbackToken.makeSealed(recordID: 42, generation: 3, vault: vault)
        #expect(suffix.hasPrefix("k2.") && !suffix.contains("/") && suffix != again)
        #expect(suffix.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) })
        #expect(("https://ens.example.com/ews/" + suffix).utf8.count < 140)
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        #expect(token.recordID == 42 && token.generation == 3)
        let sealed = try seal.seal(Array("the credentials".utf8))
        #expect(try token.credentialSeal(vault: vault)?.open(sealed) == Array("the credentials".utf8))
        // Another subscription's URL of the same record and generation opens nothing of it.
        let other = try #require(CallbackToken(path: again, vault: vault))
        #expect(throws: (any Error).self) { try #require(try other.credentialSeal(vault: vault)).open(sealed) }
    }

    @Test func aForgedAlteredOrMovedSealedURLIsRefused() throws {
        let vault = try VaultTests.vault()
        let (suffix, _) = try CallbackToken.makeSealed(recordID: 42, generation: 3, vault: vault)
        let characters = Array(suffix)
        for index in characters.indices.dropFirst(3) {
            var altered = characters
            altered[index] = altered[index] == "A" ? "B" : "A"
            #expect(CallbackToken(path: String(altered), vault: vault) == nil, "altered at \(index)")
        }
        for cut in [1, 2, 10, suffix.count / 2] {
            #expect(CallbackToken(path: String(suffix.dropLast(cut)), vault: vault) == nil)
        }
        #expect(CallbackToken(path: suffix + "A", vault: vault) == nil)
        #expect(CallbackToken(path: suffix + "/", vault: vault) == nil)
        #expect(CallbackToken(path: "42/3/" + suffix, vault: vault) == nil)
        #expect(CallbackToken(path: "k2.", vault: vault) == nil)
        #expect(CallbackToken(path: "k2." + String(repeating: "A", count: 102), vault: vault) == nil)
        #expect(CallbackToken(path: suffix, vault: try VaultTests.vault(VaultTests.otherMasterBytes)) == nil)
        // A Graph notification URL's sealed route is no Exchange callback URL.
        let route = RoutingToken(recordID: 42, generation: 3).path(vault: vault)
        #expect(CallbackToken(path: "k2." + route.dropFirst(3), vault: vault) == nil)
    }

    /// A rich subscription's URL (`b2.`) names its record and blind subscription, and
    /// nothing else opens as one: not an altered URL, not a record's own sealed route.
    @Test func blindRoutesOpenOnlyAsThemselves() throws {
        let vault = try VaultTests.vault()
        let path = try RoutingToken(recordID: 42, blindID: 7).blindPath(vault: vault)
        #expect(path.hasPrefix("b2."))
        let read = try #require(RoutingToken(path: path, vault: vault))
        #expect(read.recordID == 42 && read.blindID == 7)
        #expect(RoutingToken(path: try RoutingToken(recordID: 42, blindID: 7).blindPath(vault: vault), vault: vault) == read,
                "a fresh nonce, the same route")
        let own = RoutingToken(recordID: 42, generation: 7).path(vault: vault)
        #expect(RoutingToken(path: "b2." + own.dropFirst(3), vault: vault) == nil, "a record's route is no blind route")
        #expect(RoutingToken(path: "r2." + path.dropFirst(3), vault: vault) == nil, "nor the other way round")
        var characters = Array(path)
        characters[10] = characters[10] == "A" ? "B" : "A"
        #expect(RoutingToken(path: String(characters), vault: vault) == nil)
        #expect(RoutingToken(path: path, vault: try VaultTests.vault(VaultTests.otherMasterBytes)) == nil)
        #expect(RoutingToken(path: own, vault: vault)?.blindID == nil)
    }

    @Test func payloadsRoundTripForEveryMethod() throws {
        let identity = ClientIdentity(certificateDER: [1, 2, 3], privateKeyDER: [4, 5])
        for credentials in [
            EWSCredentials(method: .oauth(accessToken: "eyJ0.eyJ1.sig"), mailbox: "bob@example.test"),
            EWSCredentials(method: .certificate(identity), mailbox: nil),
            EWSCredentials(method: .certificate(ClientIdentity(certificateDER: [1], privateKeyDER: [2], chainDER: [[3, 3], [4]])), mailbox: nil),
            EWSCredentials(method: .basic(userName: "ü", password: ""), mailbox: nil),
            EWSCredentials(method: .oauth(accessToken: "eyJ0.eyJ1.sig"), mailbox: "bob@example.test",
                           refresh: OAuthRefresh(refreshToken: "rt.abc", tokenEndpoint: "https://login.example.test/common/oauth2/v2.0/token",
                                                 clientID: "client-1", scope: "EWS.AccessAsUser.All offline_access",
                                                 accessTokenExpiresAt: Timestamp(millisecondsSinceEpoch: 1_795_000_000_123))),
            EWSCredentials(method: .oauth(accessToken: "t"), mailbox: nil,
                           refresh: OAuthRefresh(refreshToken: "r", tokenEndpoint: "https://adfs.example.test/adfs/oauth2/token", clientID: "c")),
        ] {
            let decoded = try CallbackPayload(encoded: CallbackPayload(credentials: credentials).encoded)
            #expect(decoded.credentials == credentials)
        }
    }

    @Test func garbagePayloadsAreRefused() {
        var random = SeededGenerator(seed: 7)
        for _ in 0..<2000 {
            var bytes = random.bytes(Int.random(in: 0...64, using: &random))
            if !bytes.isEmpty && Bool.random(using: &random) { bytes[0] = 1 }
            _ = try? CallbackPayload(encoded: bytes)
        }
        #expect(throws: CallbackPayload.Invalid.self) { try CallbackPayload(encoded: []) }
        #expect(throws: CallbackPayload.Invalid.self) { try CallbackPayload(encoded: [1, 1, 0, 1, 9]) }
        #expect(throws: CallbackPayload.Invalid.self) { try CallbackPayload(encoded: [1, 1, 0, 9, 1]) }
    }

    @Test func urlLengthForTypicalCredentialsStaysFarBelowExchangesLimit() throws {
        let (suffix, _) = try Self.make(recordID: 9_999_999_999, generation: 4_000_000_000)
        #expect(("https://ens.example.com/ews/" + suffix).utf8.count < 400)
    }
}

/// Versions, escaping and Autodiscover answers.
@Suite struct EWSProtocolTests {
    @Test func exchVersionMapsIndicesAndYears() {
        #expect(EWSVersion(exchVersion: 0) == .exchange2007SP1)
        #expect(EWSVersion(exchVersion: 1) == .exchange2010)
        #expect(EWSVersion(exchVersion: 6) == .exchange2016)
        #expect(EWSVersion(exchVersion: 2013) == .exchange2013SP1)
        #expect(EWSVersion(exchVersion: 2019) == .exchange2016)
        #expect(EWSVersion(exchVersion: nil) == .exchange2010SP2)
        #expect(EWSVersion(exchVersion: -1) == .exchange2010SP2)
        #expect(EWSVersion.exchange2007SP1.older == nil)
        #expect(EWSVersion.exchange2013.older == .exchange2010SP2)
    }

    @Test func escapingMakesValuesInert() throws {
        let hostile = #"<a href="x">&amp;'</a>"# + "\u{1}"
        let document = try XMLTree.parse(Array("<r v=\"\(SOAP.escape(hostile))\">\(SOAP.escape(hostile))</r>".utf8))
        #expect(document.text == hostile.replacingOccurrences(of: "\u{1}", with: ""))
        #expect(document.attributes["v"] == hostile.replacingOccurrences(of: "\u{1}", with: ""))
    }

    @Test func poxSettingsPreferTheExternalEwsUrl() throws {
        let response = """
            <?xml version="1.0" encoding="utf-8"?>
            <Autodiscover xmlns="http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006">
              <Response xmlns="http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a">
                <Account><AccountType>email</AccountType><Action>settings</Action>
                  <Protocol><Type>EXCH</Type><EwsUrl>https://internal.example.test/EWS/Exchange.asmx</EwsUrl></Protocol>
                  <Protocol><Type>EXPR</Type><EwsUrl>https://mail.example.test/EWS/Exchange.asmx</EwsUrl></Protocol>
                </Account>
              </Response>
            </Autodiscover>
            """
        #expect(Autodiscover.readPOX(try XMLTree.parse(Array(response.utf8))) == .settings(ewsURL: "https://mail.example.test/EWS/Exchange.asmx"))
        let plainHTTP = response.replacingOccurrences(of: "https://", with: "http://")
        #expect(Autodiscover.readPOX(try XMLTree.parse(Array(plainHTTP.utf8))) == .nothing)
    }

    @Test func poxRedirectsAreReadCaseInsensitively() throws {
        func account(_ body: String) -> String {
            """
            <Autodiscover xmlns="http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006">
            <Response xmlns="http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a">
            <Account>\(body)</Account></Response></Autodiscover>
            """
        }
        let address = account("<Action>redirectAddr</Action><RedirectAddr>b@other.test</RedirectAddr>")
        #expect(Autodiscover.readPOX(try XMLTree.parse(Array(address.utf8))) == .redirectAddress("b@other.test"))
        let url = account("<Action>redirectUrl</Action><RedirectURL>https://x.test/autodiscover/autodiscover.xml</RedirectURL>")
        #expect(Autodiscover.readPOX(try XMLTree.parse(Array(url.utf8))) == .redirectURL("https://x.test/autodiscover/autodiscover.xml"))
    }

    @Test func poxErrorsGiveNothing() throws {
        let error = """
            <Autodiscover xmlns="http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006">
            <Response><Error Time="1" Id="2"><ErrorCode>500</ErrorCode><Message>The e-mail address cannot be \
            found.</Message></Error></Response></Autodiscover>
            """
        #expect(Autodiscover.readPOX(try XMLTree.parse(Array(error.utf8))) == .nothing)
    }

    @Test func soapUserSettingsAreRead() throws {
        let response = """
            <s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>
            <GetUserSettingsResponseMessage xmlns="http://schemas.microsoft.com/exchange/2010/Autodiscover"><Response>
            <ErrorCode>NoError</ErrorCode><UserResponses><UserResponse><ErrorCode>NoError</ErrorCode>
            <RedirectTarget i:nil="true" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"/>
            <UserSettings><UserSetting i:type="StringSetting" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
            <Name>ExternalEwsUrl</Name><Value>https://mail.soap.test/EWS/Exchange.asmx</Value></UserSetting></UserSettings>
            </UserResponse></UserResponses></Response></GetUserSettingsResponseMessage></s:Body></s:Envelope>
            """
        #expect(Autodiscover.readSOAP(try XMLTree.parse(Array(response.utf8))) == .settings(ewsURL: "https://mail.soap.test/EWS/Exchange.asmx"))
        let redirect = response.replacingOccurrences(of: "<UserResponse><ErrorCode>NoError</ErrorCode>",
                                                     with: "<UserResponse><ErrorCode>RedirectAddress</ErrorCode>")
            .replacingOccurrences(of: #"<RedirectTarget i:nil="true" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"/>"#,
                                  with: "<RedirectTarget>c@elsewhere.test</RedirectTarget>")
        #expect(Autodiscover.readSOAP(try XMLTree.parse(Array(redirect.utf8))) == .redirectAddress("c@elsewhere.test"))
    }

    @Test func domainsAreValidated() {
        #expect(Autodiscover.domain(of: "A@Example.Test") == "example.test")
        #expect(Autodiscover.domain(of: "a@b@c.test") == "c.test")
        for bad in ["nobody", "a@", "a@-x..y", "a@exa mple.test", "a@.test", "a@x/y.test", "a@x.test."] {
            #expect(Autodiscover.domain(of: bad) == nil, "\(bad)")
        }
    }
}
