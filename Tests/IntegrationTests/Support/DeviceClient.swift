import Curl
import Foundation
import OpenSSL
import POSIX
import Testing

/// Drives the device API the way a client app does, sealing with Python's
/// `cryptography` (Tests/tools/seal.py), never with ENS's own code.
struct DeviceClient {
    let token: String
    let client: HTTPClient

    /// `from`: the local address to connect from (127.0.0.2 is another client to nginx).
    init(token: String, from localAddress: String? = nil) throws {
        self.token = token
        self.client = try TestStack.client(from: localAddress)
    }

    /// POSTs `parameters` as JSON (default) or as a form.
    func call(_ path: String, _ parameters: [String: String], headers: [(String, String)] = [],
              form: Bool = false, apiToken: String? = nil) throws -> HTTPResponse {
        let body: [UInt8]
        let contentType: String
        if form {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            body = Array(parameters.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed)!)" }
                .joined(separator: "&").utf8)
            contentType = "application/x-www-form-urlencoded"
        } else {
            body = Array(try JSONSerialization.data(withJSONObject: parameters))
            contentType = "application/json"
        }
        var all = headers
        all.append(("ApiToken", apiToken ?? token))
        return try TestStack.post(path, body: body, contentType: contentType, headers: all, client: client)
    }

    /// A new user: returns the email, the userid the server computed and the public key.
    func newUser(_ label: String = #function) throws -> TestUser {
        try newUser(email: "\(label.filter(\.isLetter).prefix(20))-\(UUID().uuidString.prefix(8))@Example.TEST")
    }

    /// A new user with this address.
    func newUser(email: String) throws -> TestUser {
        TestSecrets.remember(email)
        TestSecrets.remember(email.lowercased())
        // A 503 asks the client to retry later, as an app would: the key pool may be
        // empty for a moment after tests that register many users while its refiller
        // waited out a MariaDB restart.
        var response = try call("/getpublickey", ["email": email])
        let deadline = Date().addingTimeInterval(60)
        while response.status == 503 && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.5)
            response = try call("/getpublickey", ["email": email])
        }
        try #require(response.status == 200, "getpublickey: \(response.status) \(response.bodyText)")
        let json = response.json
        return TestUser(email: email, userID: json["userid"] ?? "", publicKeyPEM: json["pubKey"] ?? "", responseCode: json["responseCode"] ?? "")
    }
}

struct TestUser {
    let email: String
    let userID: String
    let publicKeyPEM: String
    let responseCode: String

    /// Seals each plaintext under this user's public key with Python's cryptography:
    /// chunked, or as an envelope (docs/api.md, "Sealed parameters").
    func seal(_ plaintexts: [String], envelope: Bool = false) throws -> [String] {
        try Sealer.seal(plaintexts, publicKeyPEM: publicKeyPEM, envelope: envelope)
    }

    func seal(_ plaintext: String, envelope: Bool = false) throws -> String { try seal([plaintext], envelope: envelope)[0] }

    func sealJSON(_ object: [String: Any], envelope: Bool = false) throws -> String {
        try seal(String(decoding: JSONSerialization.data(withJSONObject: object), as: UTF8.self), envelope: envelope)
    }

    /// Sealed as a device that registered a secret sends a change to itself: bound to
    /// `purpose`, with the secret of the device `token` names (`TestSecrets.deviceSecret`).
    func sealForDevice(_ object: [String: Any], token: String, for purpose: String) throws -> String {
        var proved = object
        proved["deviceSecret"] = TestSecrets.deviceSecret(for: token)
        return try sealJSON(proved, for: purpose)
    }

    /// Sealed for one use (docs/api.md, "Sealed values"): `purpose` ("endpoint.field")
    /// and `sealedAt` (now, or `sealedAt` ms) added to the object.
    func sealJSON(_ object: [String: Any], for purpose: String, sealedAt: Int64? = nil, envelope: Bool = false) throws -> String {
        var bound = object
        bound["purpose"] = purpose
        bound["sealedAt"] = sealedAt ?? Int64(Date().timeIntervalSince1970 * 1000)
        return try sealJSON(bound, envelope: envelope)
    }
}

enum Sealer {
    static func seal(_ plaintexts: [String], publicKeyPEM: String, envelope: Bool = false) throws -> [String] {
        let directory = NSTemporaryDirectory() + "ens-seal-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try publicKeyPEM.write(toFile: directory + "/key.pem", atomically: true, encoding: .utf8)
        try JSONSerialization.data(withJSONObject: plaintexts).write(to: URL(fileURLWithPath: directory + "/in.json"))
        let tool = "\(TestStack.root)/Tests/tools/seal.py", form = envelope ? "--envelope" : ""
        let output = try TestStack.run("/bin/sh", ["-c", "python3 '\(tool)' '\(directory)/key.pem' \(form) < '\(directory)/in.json'"])
        return try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String] ?? []
    }
}

/// Every secret a test hands to the server is written down, so that scripts/test.sh can
/// check afterwards that none of them reached the database dump or a log file.
enum TestSecrets {
    static func remember(_ secret: String) {
        append(secret, to: "test-secrets.txt")
    }

    private static func append(_ secret: String, to file: String) {
        let path = TestStack.directory + "/" + file
        let line = Data((secret + "\n").utf8)
        if let handle = FileHandle(forWritingAtPath: path) {
            handle.seekToEndOfFile()
            handle.write(line)
            handle.closeFile()
        } else {
            _ = FileManager.default.createFile(atPath: path, contents: line)
        }
    }

    /// A secret that only devices in a private mode (generic, encrypted, secure) are
    /// sent: besides the database and the logs, the scan checks that it never reached
    /// a push service, in the APNs and FCM simulators' records.
    static func rememberPrivate(_ secret: String) {
        remember(secret)
        append(secret, to: "private-secrets.txt")
    }

    /// The device secret a test device registers (`deviceSecret`) and presents to the
    /// private-notification operations: derived from its push token (without any
    /// `fcm:`), so every test can name it; remembered as a secret the scan looks for.
    static func deviceSecret(for token: String) -> String {
        // The token as ENS keeps it: FCM's without `fcm:`, APNs' lowercase hex without
        // the `<…>` and spaces some apps send.
        let bare = token.hasPrefix("fcm:") ? String(token.dropFirst(4)) : token.filter { !"<> ".contains($0) }.lowercased()
        let secret = Data(Digest.sha256("device-secret:" + bare)).base64EncodedString()
        remember(secret)
        return secret
    }

    /// A random APNs-style token (32 bytes as hex), remembered as a secret.
    static func apnsToken() -> String {
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        remember(token)
        return token
    }

    /// An FCM registration token of today's shape (an instance id, a colon, and a long
    /// base64url part); remembered like every secret the scan looks for.
    static func fcmToken() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let part = { (count: Int) in String((0..<count).map { _ in alphabet.randomElement()! }) }
        let token = part(22) + ":APA91b" + part(134)
        remember(token)
        return token
    }
}
