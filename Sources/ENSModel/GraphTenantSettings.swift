/// One Entra tenant ENS serves through Microsoft Graph: its id, the mail domains whose
/// mailboxes live there, and ENS's application in it (id, certificate, key).
public struct GraphTenantSettings: Sendable, Equatable {
    public let name: String
    public var tenantID = ""
    public var domains: [String] = []
    public var clientID = ""
    public var certificateFile = ""
    public var keyFile = ""

    public init(name: String, tenantID: String = "", domains: [String] = [],
                clientID: String = "", certificateFile: String = "", keyFile: String = "") {
        self.name = name
        self.tenantID = tenantID
        self.domains = domains
        self.clientID = clientID
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}
