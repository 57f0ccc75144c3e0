import MariaDB

extension TestUser {
    /// Makes this user look subscribed at the Exchange simulator's mail.example.test, as
    /// a finished registration leaves the record (last heard from `callbackAge` seconds
    /// ago), and gives the simulator a mailbox for the address that these credentials
    /// open. A device that joins then proves itself for real (docs/security.md, "Proof
    /// of possession"); tests that need the whole Exchange path use ExchangeTests'.
    func pretendSubscribed(database: Connection, password: String? = nil, oauthToken: String? = nil, callbackAge: Int = 0) throws {
        if let password { TestSecrets.remember(password) }
        if let oauthToken { TestSecrets.remember(oauthToken) }
        try ExchangeSimulator.mailbox(email, userName: password == nil ? nil : email, password: password, oauthToken: oauthToken)
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET registered = 1, ews_subscription_id = 'sub-test',
              ews_url = 'https://mail.example.test/EWS/Exchange.asmx', ews_version = 'Exchange2010_SP2',
              last_callback_at = NOW(3) - INTERVAL \(callbackAge) SECOND, status_frequency_minutes = 30
            WHERE userid = \(userID)
            """)
    }
}
