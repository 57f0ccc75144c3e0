public import ENSHTTP
internal import ENSStore
internal import ENSMetrics
internal import ENSModel
internal import Logging
internal import POSIX
internal import MailBackends

/// Turns one request into one answer: the checks every endpoint shares, in a
/// fixed order (404, 405, 401, 413, 415, 400), then the endpoint's handler.
/// Nothing a client sends can make this trap; every failure is a JSON answer.
public struct Dispatcher: Sendable {
    let router: Router
    let maxBodyBytes: Int
    let tokenCheck: @Sendable (String?) -> Bool
    /// nginx's request limits, when the responders apply them (`limits.enforce`).
    let limits: RequestLimits?

    public init(router: Router, maxBodyBytes: Int, limits: RequestLimits? = nil, tokenCheck: @escaping @Sendable (String?) -> Bool) {
        self.router = router
        self.maxBodyBytes = maxBodyBytes
        self.limits = limits
        self.tokenCheck = tokenCheck
    }

    public func respond(to channel: some RequestChannel, context: RequestContext) {
        let started = MonotonicClock.nanoseconds()
        let method = String(decoding: channel.parameter("REQUEST_METHOD") ?? [], as: UTF8.self)
        let pathBytes = channel.parameter("DOCUMENT_URI") ?? channel.parameter("SCRIPT_NAME") ?? []
        let path = String.validatedUTF8(pathBytes)
        let match = router.match(path)
        let response: APIResponse
        do {
            response = try handle(channel, method: method, path: path ?? "", route: match.route, context: context)
        } catch let error as APIError {
            if error.response.status == 400 {
                context.logger.debug("invalid request", metadata: ["reason": "\(error.reason)"])
            }
            response = error.response
        } catch let error as DatabaseError where error.isUnavailable {
            // Unreachable, no usable Galera node, or a conflict that outlasted every
            // rerun: the transaction was rolled back, and the client may try again
            // (only a COMMIT cut off by a lost connection has an unknown outcome).
            context.invalidateHealth()
            context.noteDatabaseUnavailable(error)
            response = APIError.serviceUnavailable.response
        } catch {
            // Only a log-safe description is logged; the client gets a generic 500.
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            response = APIError.internalError.response
        }
        channel.write(response.cgiBytes(includeBody: method != "HEAD"))
        // The label is the route, never the path: callback paths carry sealed tokens.
        context.requestCounters?.record(label: match.label, status: response.status,
                                        seconds: Double(MonotonicClock.nanoseconds() &- started) / 1e9)
    }

    private func handle(_ channel: some RequestChannel, method: String, path: String, route: Route?, context: RequestContext) throws -> APIResponse {
        guard let route else { throw APIError.notFound }
        // The limits come first, as nginx's limit_req does in a location: before the
        // method, the token and any database work.
        if let limits, limits.applies(asked: channel.parameter("ENS_LIMITS") == Array("1".utf8)),
           let refusal = limits.refusal(path: path, address: channel.parameter("REMOTE_ADDR").flatMap { String.validatedUTF8($0) }) {
            throw refusal
        }
        guard route.allows(method) else { throw APIError.methodNotAllowed(route.methods) }

        let apiToken = try header(channel, "HTTP_APITOKEN")
        if route.requiresAPIToken && !tokenCheck(apiToken) { throw APIError.unauthorized }

        var parameters = Parameters()
        var body: [UInt8] = []
        // A body comes with POST, and with PUT (Dovecot's ox driver pushes with PUT).
        if method == "POST" || method == "PUT" {
            switch route.body {
            case .parameters: parameters = try readParameters(channel)
            case .xml(let limit): body = try readXML(channel, limit: limit)
            case .raw(let limit): body = try readRaw(channel, limit: limit)
            }
        }
        let request = Request(
            method: method, path: path, query: String(decoding: channel.parameter("QUERY_STRING") ?? [], as: UTF8.self), apiToken: apiToken,
            authorization: route.readsAuthorization ? try header(channel, "HTTP_AUTHORIZATION") : nil,
            badge: try flagHeader(channel, "HTTP_BADGE"),
            development: try flagHeader(channel, "HTTP_DEVELOPMENT"),
            parameters: parameters, body: body,
            clientAddress: channel.parameter("REMOTE_ADDR").flatMap { String.validatedUTF8($0) }
        )
        // The one place a request meets its shard: before the handler, which then finds
        // the user's tables on `context.database`. Without a map there is one database,
        // and a callback's URL is not opened twice to find its bucket.
        if context.isSharded { context.route(toBucket: route.bucket?(request, context)) }
        if context.bucketIsFrozen {
            // Its rows are being copied to another shard: no write may land on either
            // side now. Devices, Exchange and Graph all retry a 503.
            var frozen = APIError.serviceUnavailable.response
            frozen.extraHeaders = [("Retry-After", "30")]
            return frozen
        }
        return try route.handler(request, context)
    }

    /// The declared body length, refused before reading when over `limit`.
    private func contentLength(_ channel: some RequestChannel, limit: Int) throws(APIError) -> Int {
        let lengthText = String(decoding: channel.parameter("CONTENT_LENGTH") ?? [], as: UTF8.self)
        let length = lengthText.isEmpty ? 0 : Int(lengthText) ?? -1
        guard length >= 0 else { throw .invalidRequest("Invalid Content-Length.") }
        guard length <= limit else { throw .payloadTooLarge(limit: limit) }
        return length
    }

    /// Reads an XML body (text/xml or application/xml) whole.
    private func readXML(_ channel: some RequestChannel, limit: Int) throws(APIError) -> [UInt8] {
        let length = try contentLength(channel, limit: limit)
        guard MediaType(channel.parameter("CONTENT_TYPE") ?? []) == .xml else { throw .unsupportedXMLMediaType }
        let body = channel.readBody(limit: length)
        guard body.count == length, length > 0 else { throw .invalidRequest("The request body is missing or ended early.") }
        return body
    }

    /// Reads a body of any media type whole (possibly empty).
    private func readRaw(_ channel: some RequestChannel, limit: Int) throws(APIError) -> [UInt8] {
        let length = try contentLength(channel, limit: limit)
        let body = length == 0 ? [] : channel.readBody(limit: length)
        guard body.count == length else { throw .invalidRequest("The request body ended early.") }
        return body
    }

    /// Reads and decodes the body, refusing oversize bodies before reading them.
    private func readParameters(_ channel: some RequestChannel) throws(APIError) -> Parameters {
        let length = try contentLength(channel, limit: maxBodyBytes)

        let contentType = MediaType(channel.parameter("CONTENT_TYPE") ?? [])
        if length == 0 && contentType == .absent { return Parameters() }
        guard contentType == .json || contentType == .form else { throw .unsupportedMediaType }

        let body = channel.readBody(limit: length)
        guard body.count == length else { throw .invalidRequest("The request body ended early.") }
        return try ParameterDecoder.decode(body, json: contentType == .json)
    }

    private func header(_ channel: some RequestChannel, _ name: String) throws(APIError) -> String? {
        guard let bytes = channel.parameter(name) else { return nil }
        guard let text = String.validatedUTF8(bytes), !text.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
            throw .invalidRequest("A header is not valid text.")
        }
        return text
    }

    private func flagHeader(_ channel: some RequestChannel, _ name: String) throws(APIError) -> Bool? {
        guard let value = try header(channel, name) else { return nil }
        switch value.trimmingCharacters(in: " ") {
        case "1", "true": return true
        case "0", "false", "": return false
        default: throw .invalidRequest("Headers badge and development take 0 or 1.")
        }
    }
}

/// The request content types the API accepts.
enum MediaType: Equatable {
    case absent, json, form, xml, other

    init(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else {
            self = .absent
            return
        }
        let text = String(decoding: bytes, as: UTF8.self).lowercased()
        let essence = text.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first.map { $0.trimmingCharacters(in: " \t") } ?? ""
        switch essence {
        case "application/json": self = .json
        case "application/x-www-form-urlencoded": self = .form
        case "text/xml", "application/xml": self = .xml
        default: self = .other
        }
    }
}

/// Body bytes → named parameters, for both accepted content types.
enum ParameterDecoder {
    static func decode(_ body: [UInt8], json: Bool) throws(APIError) -> Parameters {
        guard json else {
            do {
                return Parameters(try FormDecoder.decode(body))
            } catch {
                throw .invalidRequest("Malformed form body: \(error.problem).")
            }
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(body)
        } catch {
            throw .invalidRequest("Malformed JSON body: \(error.problem).")
        }
        guard case .object(let members) = value else { throw .invalidRequest("The JSON body must be an object.") }
        var values: [String: String] = [:]
        for (name, member) in members {
            if case .null = member { continue }
            guard let text = member.scalarText else {
                throw .invalidRequest("Parameter '\(name.prefix(40))' must be a string or a number.")
            }
            guard !text.utf8.contains(0), !name.utf8.contains(0) else { throw .invalidRequest("A parameter contains a NUL byte.") }
            values[name] = text
        }
        return Parameters(values)
    }
}
