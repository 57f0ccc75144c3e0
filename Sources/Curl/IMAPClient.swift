internal import CCurl
public import POSIX

/// Where an IMAP server is and how it is trusted.
public struct IMAPServerConfiguration: Sendable {
    /// `imaps://host:port/` (TLS from the start) or `imap://host:port/` (STARTTLS, which
    /// is then required: a server that does not offer it is refused, never spoken to in
    /// clear).
    public var url: String
    /// PEM bundle of trusted CAs (or the server's own self-signed certificate); nil uses
    /// the system store. Certificate and host name are always verified.
    public var caBundlePath: String?
    /// The same, as PEM text (a server's own certificate kept in the database); it takes
    /// the place of `caBundlePath`.
    public var caPEM: [UInt8]?
    /// `sha256//<base64>` of the server's public key: the connection is refused unless
    /// the key matches (on top of the verification above).
    public var pinnedPublicKey: String?
    public var connectTimeout: Duration
    /// The limit of one `run`: a wrong password alone costs Dovecot's
    /// `auth_failure_delay` (2 s), and repeated failures from one address up to 15 s.
    public var totalTimeout: Duration
    /// libcurl CONNECT_TO entries, for tests that give a host name a loopback address.
    public var connectTo: [String]
    /// Where the client may connect; nil: anywhere (a server the operator registered).
    public var destinationPolicy: DestinationPolicy?

    public init(url: String, caBundlePath: String? = nil, caPEM: [UInt8]? = nil,
                pinnedPublicKey: String? = nil, connectTimeout: Duration = .seconds(5),
                totalTimeout: Duration = .seconds(25), connectTo: [String] = [], destinationPolicy: DestinationPolicy? = nil) {
        self.url = url
        self.caBundlePath = caBundlePath
        self.caPEM = caPEM
        self.pinnedPublicKey = pinnedPublicKey
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.connectTo = connectTo
        self.destinationPolicy = destinationPolicy
    }
}

/// An IMAP session over one libcurl easy handle: each `run` logs in (libcurl picks
/// SASL PLAIN or LOGIN) and sends one command; the connection, and with it the login,
/// is reused by the next `run` for the same account. Owns the `CURL` handle; one thread
/// at a time.
///
/// What the server sends back untagged (`* METADATA ...`) is read from libcurl's debug
/// callback; the client keeps those lines and nothing libcurl sends, so the password
/// never passes through Swift after it was handed to libcurl. (libcurl also writes the
/// replies that repeat the command's name to the write callback; that copy is dropped,
/// never written to standard output.)
public final class IMAPClient {
    private let handle: UnsafeMutableRawPointer
    private let configuration: IMAPServerConfiguration
    private let connectGuard: ConnectGuard?
    /// The account the cached connection is logged in as.
    private var lastLogin: String?

    /// The most a server's replies to one command may add up to; past it they are cut.
    static let maximumReplyBytes = 64 * 1024

    public init(configuration: IMAPServerConfiguration) throws(CurlError) {
        guard configuration.url.hasPrefix("imaps://") || configuration.url.hasPrefix("imap://") else {
            throw CurlError(.invalidRequest, detail: "an IMAP server's URL starts with imaps:// or imap://")
        }
        guard CurlLibrary.initialized, let handle = curl_easy_init() else {
            throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_easy_init")
        }
        self.handle = handle
        self.configuration = configuration
        connectGuard = configuration.destinationPolicy.map(ConnectGuard.init)
    }

    deinit {
        curl_easy_cleanup(handle)
    }

    /// Whether `command` can be sent as it is: printable ASCII without `%` (libcurl
    /// percent-decodes a custom command) and without quotes inside quoted strings that
    /// could end them early. Routing tokens and metadata names fit.
    public static func isSendable(_ command: String) -> Bool {
        !command.isEmpty && command.utf8.count <= 1000 && command.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "%") }
    }

    /// Logs in as `login` and runs `command` (without a tag), returning the server's
    /// untagged replies named `replyName` (`METADATA` for GETMETADATA; nil: none are
    /// wanted), without the `* ` and the name, literals spliced in (`* METADATA "" (/x {3}`
    /// and `abc)` become `"" (/x abc)`). A refused login throws `.loginDenied`; NO or
    /// BAD to the command `.commandRefused`.
    public func run(_ command: String, replyName: String? = nil, login: String, password: String,
                    deadline: Deadline? = nil) throws(CurlError) -> [String] {
        guard Self.isSendable(command) else { throw CurlError(.invalidRequest, detail: "the IMAP command has characters it cannot carry") }
        for credential in [login, password] where credential.isEmpty || credential.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw CurlError(.invalidRequest, detail: "a login or password is empty or has control characters")
        }
        var timeout = configuration.totalTimeout.wholeMilliseconds
        if let deadline {
            let left = deadline.remainingMilliseconds
            guard left > 0 else { throw CurlError(.budgetExhausted, detail: "no time left for this command") }
            timeout = min(timeout, left)
        }
        if let policy = configuration.destinationPolicy { try HTTPClient.check(configuration.url, against: policy) }
        curl_easy_reset(handle)
        let replies = IMAPReplies(limit: Self.maximumReplyBytes)
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE))
        var connectToList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(connectToList) }
        for entry in configuration.connectTo { connectToList = curl_slist_append(connectToList, entry) }

        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
            var options = EasyOptions(handle)
            options.set(CURLOPT_URL, string: configuration.url)
            options.set(CURLOPT_ERRORBUFFER, pointer: errorPointer.baseAddress)
            options.set(CURLOPT_NOSIGNAL, 1)
            options.set(CURLOPT_PROTOCOLS, Int(CURLPROTO_IMAPS | CURLPROTO_IMAP))
            options.noProxy()
            // Plain imap:// only ever goes on after STARTTLS.
            options.set(CURLOPT_USE_SSL, Int(CURLUSESSL_ALL.rawValue))
            options.set(CURLOPT_CONNECTTIMEOUT_MS, min(configuration.connectTimeout.wholeMilliseconds, timeout))
            options.set(CURLOPT_TIMEOUT_MS, timeout)
            options.verifyTLS(caBundlePath: configuration.caBundlePath)
            if let caPEM = configuration.caPEM { options.trust(pem: caPEM) }
            if let pin = configuration.pinnedPublicKey { options.set(CURLOPT_PINNEDPUBLICKEY, string: pin) }
            if let connectGuard { options.guardConnections(with: connectGuard) }
            if connectToList != nil { options.set(CURLOPT_CONNECT_TO, pointer: UnsafeRawPointer(connectToList)) }
            // One cached connection, never shared across accounts.
            options.set(CURLOPT_MAXCONNECTS, 1)
            if login != lastLogin { options.set(CURLOPT_FRESH_CONNECT, 1) }
            options.set(CURLOPT_USERNAME, string: login)
            options.set(CURLOPT_PASSWORD, string: password)
            options.set(CURLOPT_CUSTOMREQUEST, string: command)
            options.collectIMAPReplies(into: replies)
            if options.result != CURLE_OK { return options.result }
            let performed = curl_easy_perform(handle)
            _ = ccurl_easy_setopt_ptr(handle, CURLOPT_ERRORBUFFER, nil)
            // libcurl keeps the password for the cached connection's next login only as
            // long as the handle's options say so: clear it now.
            _ = ccurl_easy_setopt_string(handle, CURLOPT_PASSWORD, nil)
            return performed
        }
        if let refused = connectGuard?.takeRefusal() {
            throw CurlError(.destinationRefused, detail: "\(refused) is not a permitted address")
        }
        guard code == CURLE_OK else {
            lastLogin = nil
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw CurlError(code: code, detail: detail)
        }
        lastLogin = login
        return replyName.map(replies.untagged(named:)) ?? []
    }
}

/// The server's lines as libcurl's debug callback hands them over, up to a limit.
final class IMAPReplies {
    private var bytes: [UInt8] = []
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    func append(_ chunk: UnsafeRawBufferPointer) {
        let room = limit - bytes.count
        guard room > 0 else { return }
        bytes.append(contentsOf: chunk.prefix(room))
    }

    /// The untagged replies named `name` (`* NAME rest`), as `rest`, each with its
    /// literals spliced in.
    func untagged(named name: String) -> [String] {
        let prefix = "* " + name + " "
        return IMAPReplies.lines(bytes).filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    /// Splits the server's bytes into lines: CRLF ends a line, except inside a literal
    /// (`{N}` at the end of a line announces N raw bytes that belong to it).
    static func lines(_ bytes: [UInt8]) -> [String] {
        var lines: [String] = []
        var current: [UInt8] = []
        var index = 0
        while index < bytes.count {
            guard let end = bytes[index...].firstIndex(of: 0x0A) else {
                current += bytes[index...]
                break
            }
            var line = Array(bytes[index..<end])
            if line.last == 0x0D { line.removeLast() }
            index = end + 1
            current += line
            if let (open, length) = literal(line), length <= bytes.count - index {
                // The `{N}` goes; the literal's bytes take its place.
                current.removeLast(line.count - open)
                current += bytes[index..<(index + length)]
                index += length
                continue
            }
            lines.append(String(decoding: current, as: UTF8.self))
            current = []
        }
        if !current.isEmpty { lines.append(String(decoding: current, as: UTF8.self)) }
        return lines
    }

    /// Where `{N}` starts and N, when `line` ends with it (a literal follows).
    private static func literal(_ line: [UInt8]) -> (open: Int, length: Int)? {
        guard line.last == UInt8(ascii: "}"), let open = line.lastIndex(of: UInt8(ascii: "{")) else { return nil }
        let digits = line[(open + 1)..<(line.count - 1)]
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let length = Int(String(decoding: digits, as: UTF8.self)) else { return nil }
        return (open, length)
    }
}
