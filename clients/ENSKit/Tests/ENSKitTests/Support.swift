import Crypto
import CryptoExtras
import Foundation
import Testing
@testable import ENSKit

/// Test data in Vectors/ (made with Python's `cryptography`; see make_vectors.py).
enum Vectors {
    static func json(_ name: String) throws -> [String: Any] {
        let url = try #require(Bundle.module.url(forResource: "Vectors/\(name)", withExtension: "json"))
        return try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    /// An RSA-2048 key pair standing in for a user record's key: `first` or `second`.
    static func serverKey(_ which: String = "first") throws -> (publicPEM: String, privateKey: _RSA.Encryption.PrivateKey) {
        let pair = try #require(try json("server-key")[which] as? [String: String])
        let publicPEM = try #require(pair["public"])
        let privatePEM = try #require(pair["private"])
        return (publicPEM, try _RSA.Encryption.PrivateKey(pemRepresentation: privatePEM))
    }
}

/// Opens what ENSKit sealed, as ENS does: base64, k-byte blocks, PKCS#1 v1.5 each; or
/// an envelope (`e1:`): the key block, then AES-256-GCM.
func unseal(_ text: String, with key: _RSA.Encryption.PrivateKey) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: try unsealedBytes(text, with: key)) as? [String: Any])
}

func unsealedBytes(_ text: String, with key: _RSA.Encryption.PrivateKey) throws -> Data {
    let k = key.keySizeInBits / 8
    if text.hasPrefix("e1:") {
        let sealed = try #require(Data(base64Encoded: String(text.dropFirst(3))))
        let contentKey = try key.decrypt(sealed.prefix(k), padding: ._WEAK_AND_INSECURE_PKCS_V1_5)
        #expect(contentKey.count == 32)
        let box = try AES.GCM.SealedBox(combined: sealed.dropFirst(k))
        return try AES.GCM.open(box, using: SymmetricKey(data: contentKey), authenticating: Data("ens-envelope/1".utf8))
    }
    let sealed = try #require(Data(base64Encoded: text))
    #expect(sealed.count % k == 0)
    var plaintext = Data()
    for start in stride(from: 0, to: sealed.count, by: k) {
        plaintext.append(try key.decrypt(sealed[start..<start + k], padding: ._WEAK_AND_INSECURE_PKCS_V1_5))
    }
    return plaintext
}

/// The JSON object in `data`, as an independent reader (JSONSerialization) sees it.
func jsonObject(_ data: Data) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
}

/// A transport that answers from a script and records every request.
final class RecordedTransport: ENSHTTPTransport, @unchecked Sendable {
    // @unchecked: every access to the mutable state holds `lock`.
    private let lock = NSLock()
    private var answers: [(Int, [String: String], String)]
    private var recorded: [ENSHTTPRequest] = []

    /// Each answer: status, headers, body; used in order.
    init(_ answers: [(Int, [String: String], String)]) { self.answers = answers }

    convenience init(json answers: String...) { self.init(answers.map { (200, [:], $0) }) }

    func send(_ request: ENSHTTPRequest) async throws(ENSTransportError) -> ENSHTTPResponse {
        try answer(request)
    }

    private func answer(_ request: ENSHTTPRequest) throws(ENSTransportError) -> ENSHTTPResponse {
        lock.lock()
        defer { lock.unlock() }
        recorded.append(request)
        guard !answers.isEmpty else { throw ENSTransportError("no recorded answer left") }
        let (status, headers, body) = answers.removeFirst()
        return ENSHTTPResponse(status: status, headers: headers, body: Data(body.utf8))
    }

    var requests: [ENSHTTPRequest] {
        lock.lock()
        defer { lock.unlock() }
        return recorded
    }

    func parameters(_ index: Int) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: requests[index].body) as? [String: Any])
    }
}

/// Sleeps the client asked for, recorded instead of slept.
final class Sleeps: @unchecked Sendable {
    private let lock = NSLock()
    private var delays: [Duration] = []
    func record(_ value: Duration) { lock.lock(); delays.append(value); lock.unlock() }
    var all: [Duration] { lock.lock(); defer { lock.unlock() }; return delays }
}

let testTime = Date(timeIntervalSince1970: 1_764_081_234.567)

func makeClient(_ transport: RecordedTransport, keyStore: MemoryKeyStore = MemoryKeyStore(), sleeps: Sleeps = Sleeps(),
                retry: ENSRetryPolicy = ENSRetryPolicy()) throws -> ENSClient {
    let configuration = ENSConfiguration(baseURL: try #require(URL(string: "https://ens.example.test")),
                                         apiToken: "ens_" + String(repeating: "ab", count: 32),
                                         bundleID: "com.example.mail", badge: true, retry: retry)
    return ENSClient(configuration: configuration, transport: transport, keyStore: keyStore,
                     sleep: { sleeps.record($0) }, now: { testTime })
}

/// The JSON of `/getpublickey`'s answer for `user` with `pem`.
func publicKeyAnswer(_ user: ENSUser, _ pem: String, code: String = "UserRecordPresentNotSubscribed") throws -> String {
    let object: [String: Any] = ["pubKey": pem, "userid": user.userID, "responseCode": code]
    return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
}
