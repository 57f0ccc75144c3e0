internal import COpenSSL

/// The thumbprints a JWS header names its signer's certificate by (RFC 7515 §4.1.7–8):
/// `x5t` is the SHA-1 of the certificate's DER, `x5t#S256` its SHA-256, each sent
/// base64url-encoded (by the caller). Microsoft Graph's client assertions carry them.
public struct CertificateThumbprint: Sendable, Equatable {
    /// `x5t`: SHA-1 of the DER certificate, 20 bytes.
    public let sha1: [UInt8]
    /// `x5t#S256`: SHA-256 of the DER certificate, 32 bytes.
    public let sha256: [UInt8]

    /// Fails unless `der` is exactly one DER X.509 certificate — not PEM text, not a
    /// key, nothing after it — so a thumbprint is never taken of the wrong bytes.
    public init(certificateDER der: [UInt8]) throws(OpenSSLError) {
        let consumed: Int? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let certificate = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            X509_free(certificate)
            return cursor.map { $0 - buffer.baseAddress! }
        }
        guard let consumed else { throw .drain("read DER certificate") }
        guard consumed == der.count else {
            throw OpenSSLError(operation: "read DER certificate", reasons: ["\(der.count - consumed) bytes after the certificate"])
        }
        sha1 = Digest.sha1(der)
        sha256 = Digest.sha256(der)
    }
}
