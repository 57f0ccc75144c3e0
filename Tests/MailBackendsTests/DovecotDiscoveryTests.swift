import ENSTestSupport
@testable import MailBackends
import Testing

/// What discovery takes from a domain's autoconfig file (Thunderbird's clientConfig 1.1).
@Suite struct DovecotDiscoveryTests {
    /// In the shape Thunderbird's ISPDB and hosting panels publish.
    static let autoconfig = """
        <?xml version="1.0" encoding="UTF-8"?>
        <clientConfig version="1.1">
          <emailProvider id="hosted.test">
            <domain>hosted.test</domain>
            <displayName>Hosted mail</displayName>
            <incomingServer type="pop3">
              <hostname>pop.hosted.test</hostname><port>995</port><socketType>SSL</socketType>
            </incomingServer>
            <incomingServer type="imap">
              <hostname>plain.hosted.test</hostname><port>143</port><socketType>plain</socketType>
            </incomingServer>
            <incomingServer type="imap">
              <hostname> IMAP.%EMAILDOMAIN%. </hostname>
              <port>993</port>
              <socketType>SSL</socketType>
              <username>%EMAILADDRESS%</username>
              <authentication>password-cleartext</authentication>
            </incomingServer>
            <incomingServer type="imap">
              <hostname>mail.provider.example</hostname><port>143</port><socketType>STARTTLS</socketType>
            </incomingServer>
            <outgoingServer type="smtp">
              <hostname>smtp.hosted.test</hostname><port>465</port><socketType>SSL</socketType>
            </outgoingServer>
          </emailProvider>
        </clientConfig>
        """

    @Test func imapServersOverTLSInTheFilesOrder() {
        let servers = DovecotDiscovery.incomingIMAPServers(autoconfig: Array(Self.autoconfig.utf8), domain: "hosted.test")
        #expect(servers.map { "\($0.host):\($0.port)" } == ["imap.hosted.test:993", "mail.provider.example:143"])
    }

    @Test func anythingElseIsNothing() {
        let refused = [
            "", "not xml", "<clientConfig/>", "<html><body>404</body></html>",
            // A DTD could expand entities: refused by the parser, not resolved.
            "<!DOCTYPE x [<!ENTITY a 'imap.evil.test'>]><clientConfig><emailProvider><incomingServer " +
            "type=\"imap\"><hostname>&a;</hostname><port>993</port><socketType>SSL</socketType></incomingServer></emailProvider></clientConfig>",
            "<clientConfig><emailProvider><incomingServer " +
            "type=\"imap\"><hostname>h.test</hostname><port>99999</port><socketType>SSL</socketType></incomingServer></emailProvider></clientConfig>",
            "<clientConfig><emailProvider><incomingServer " +
            "type=\"imap\"><hostname></hostname><port>993</port><socketType>SSL</socketType></incomingServer></emailProvider></clientConfig>",
            String(repeating: "<a>", count: 5000),
        ]
        for text in refused {
            #expect(DovecotDiscovery.incomingIMAPServers(autoconfig: Array(text.utf8), domain: "hosted.test").isEmpty, "\(text.prefix(60))")
        }
    }

    @Test func theAddressIsNotSentToTheDomainsWebServer() {
        let urls = DovecotDiscovery.autoconfigURLs(domain: "hosted.test")
        #expect(urls == ["https://autoconfig.hosted.test/mail/config-v1.1.xml",
                         "https://hosted.test/.well-known/autoconfig/mail/config-v1.1.xml"])
        #expect(urls.allSatisfy { !$0.contains("?") && !$0.contains("@") })
    }
}
