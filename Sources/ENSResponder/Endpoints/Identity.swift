internal import ENSCore
internal import OpenSSL

/// Who a request is about: `userid` (hex SHA-256 of the lowercased email), derived from
/// `email` when only that is given, and checked against it when both are.
enum Identity {
    static func userID(_ parameters: Parameters, emailRequired: Bool = false) throws(APIError) -> String {
        let email = parameters["email"].flatMap { $0.isEmpty ? nil : $0 }
        if emailRequired && email == nil { throw .invalidRequest("Missing parameter 'email'.") }
        let derived = email.map { Hex.encode(Digest.sha256($0.lowercased())) }
        guard let given = parameters["userid"], !given.isEmpty else {
            guard let derived else { throw .invalidRequest("Missing parameter 'userid'.") }
            return derived
        }
        let userID = given.lowercased()
        guard userID.utf8.count == 64, userID.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
            throw .invalidRequest("Parameter 'userid' must be 64 hexadecimal characters.")
        }
        if let derived, !Digest.constantTimeEqual(Array(derived.utf8), Array(userID.utf8)) {
            throw .invalidRequest("Parameters 'userid' and 'email' do not match.")
        }
        return userID
    }
}
