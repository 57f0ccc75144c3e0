internal import ENSHTTP
internal import Codecs
internal import OpenSSL
internal import MailBackends

/// Who a request is about: `userid` (hex SHA-256 of the lowercased email), derived from
/// `email` when only that is given, and checked against it when both are.
enum Identity {
    static func userID(_ parameters: Parameters, emailRequired: Bool = false) throws(APIError) -> String {
        let email = parameters["email"].flatMap { $0.isEmpty ? nil : $0 }
        if emailRequired && email == nil { throw .invalidRequest("Missing parameter 'email'.") }
        if let email, !isEmailAddress(email) { throw .invalidRequest("Parameter 'email' must be an email address.") }
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

    /// An address ENS may hand to Exchange (Autodiscover's input, X-AnchorMailbox): one
    /// `@`; a local part of 1–64 bytes without whitespace, control characters or the
    /// characters that would need quoting; a host name of letters, digits and hyphens
    /// (UTF-8 letters of an internationalised domain too) with at least one dot. Up to
    /// 254 bytes in all (RFC 5321).
    static func isEmailAddress(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count <= 254, let at = bytes.firstIndex(of: UInt8(ascii: "@")), bytes.lastIndex(of: UInt8(ascii: "@")) == at else { return false }
        let local = bytes[..<at]
        let domain = bytes[(at + 1)...]
        let forbiddenInLocal = Set(#" "(),:;<>[\]"#.utf8)
        guard (1...64).contains(local.count), local.allSatisfy({ $0 > 0x20 && $0 != 0x7F && !forbiddenInLocal.contains($0) }),
              local.first != UInt8(ascii: "."), local.last != UInt8(ascii: ".") else { return false }
        let labels = domain.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { label in
            (1...63).contains(label.count) && label.first != UInt8(ascii: "-") && label.last != UInt8(ascii: "-")
                && label.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A)
                    || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 >= 0x80 }
        }
    }
}
