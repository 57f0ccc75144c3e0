import ENSTestSupport
import Testing
@testable import ENSConfig

/// push.host_name: the name a sender's heartbeat row goes under (SenderHosts.host).
@Suite struct SenderHostNameTests {
    @Test(arguments: ["a", "ens-1", "ens1.example.com", "ENS_Host-2.b", String(repeating: "h", count: 64)])
    func validNames(_ name: String) {
        #expect(ENSConfiguration.isValidSenderHostName(name))
    }

    @Test(arguments: ["", String(repeating: "h", count: 65), "ens 1", "ens/1", "ens;rm", "hôte", "ens\n1", "`x`", "a:b"])
    func invalidNames(_ name: String) {
        #expect(!ENSConfiguration.isValidSenderHostName(name))
    }

    @Test func theKeyIsCheckedAndDefaultsToTheSystemName() throws {
        let set = try ENSConfiguration(file: ConfigFile(parsing: "push.host_name = ens-b.example\n"))
        #expect(set.push.hostName == "ens-b.example")
        #expect(try set.push.senderHostName() == "ens-b.example")
        #expect(throws: ConfigError(key: "push.host_name", line: 1, problem: "must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'")) {
            try ENSConfiguration(file: ConfigFile(parsing: "push.host_name = two words\n"))
        }
        let unset = try ENSConfiguration(file: ConfigFile(parsing: "push.host_name =\n"))
        #expect(unset.push.hostName == nil)
        // Unset: the system's host name (the test machine's always fits).
        #expect(ENSConfiguration.isValidSenderHostName(try unset.push.senderHostName()))
    }
}
