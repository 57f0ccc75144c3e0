/// One SRV record (RFC 2782): where a service of a domain is offered.
public struct SRVRecord: Sendable, Equatable, CustomStringConvertible {
    public let priority: UInt16
    public let weight: UInt16
    public let port: UInt16
    /// The host, lowercase, without the final dot; "." (the service is decidedly not
    /// offered) is the empty string.
    public let target: String

    public init(priority: UInt16, weight: UInt16, port: UInt16, target: String) {
        self.priority = priority
        self.weight = weight
        self.port = port
        self.target = target
    }

    public var description: String { "\(priority) \(weight) \(port) \(target.isEmpty ? "." : target)" }
}

/// Why a DNS lookup gave no answer. A name that does not exist (NXDOMAIN) or has no
/// record of the type is not an error: it is an empty answer.
public struct DNSError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The name to look up is not a DNS name (empty label, label over 63 bytes, ...).
        case invalidName
        /// The reply is not a well-formed answer to the question asked.
        case malformed
        /// The server answered with an error code other than NXDOMAIN (SERVFAIL, REFUSED...).
        case serverFailure(rcode: UInt8)
        /// The answer did not fit in a UDP reply (TC set); SRV answers always do.
        case truncated
        /// No nameserver answered in time.
        case timeout
        /// No nameserver is configured (resolv.conf names none), or a socket failed.
        case unavailable
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "DNS: \(detail)" }
}

/// The DNS wire format (RFC 1035, section 4) for the one question ENS asks: the SRV
/// records of a name. Replies are read strictly: every length is checked against the
/// message, compression pointers may only point backwards (so they cannot loop), and
/// the question must be the one asked.
public enum DNSMessage {
    public static let typeSRV: UInt16 = 33
    static let classIN: UInt16 = 1
    /// RFC 1035's limit for a reply over UDP without EDNS.
    public static let maximumUDPSize = 512

    /// A standard query with recursion desired for `name`'s records of `type`.
    public static func query(id: UInt16, name: String, type: UInt16) throws(DNSError) -> [UInt8] {
        var message: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
        message += try encode(name: name)
        message += [UInt8(type >> 8), UInt8(type & 0xFF), 0, UInt8(classIN)]
        return message
    }

    /// `name` as labels; a final dot is allowed, an empty label elsewhere is not.
    static func encode(name: String) throws(DNSError) -> [UInt8] {
        var text = Substring(name)
        if text.hasSuffix(".") { text = text.dropLast() }
        guard !text.isEmpty, text.utf8.count <= 253 else { throw DNSError(.invalidName, "a name of \(name.utf8.count) bytes") }
        var bytes: [UInt8] = []
        for label in text.split(separator: ".", omittingEmptySubsequences: false) {
            let utf8 = Array(label.utf8)
            guard (1...63).contains(utf8.count), !utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
                throw DNSError(.invalidName, "a label of \(utf8.count) bytes, or one with a space or a byte outside ASCII")
            }
            bytes.append(UInt8(utf8.count))
            bytes += utf8
        }
        return bytes + [0]
    }

    /// The SRV records in `reply` to the query `id` for `name`; empty for NXDOMAIN or no
    /// records. Records for other owners (a CNAME chain's) and of other types are skipped.
    public static func srvAnswers(_ reply: [UInt8], id: UInt16, name: String) throws(DNSError) -> [SRVRecord] {
        var reader = Reader(bytes: reply)
        guard reply.count >= 12 else { throw DNSError(.malformed, "a reply of \(reply.count) bytes is shorter than a header") }
        guard try reader.u16() == id else { throw DNSError(.malformed, "a reply to another query") }
        let flags = try reader.u16()
        guard flags & 0x8000 != 0, (flags >> 11) & 0xF == 0 else { throw DNSError(.malformed, "not a reply to a standard query") }
        guard flags & 0x0200 == 0 else { throw DNSError(.truncated, "the reply was truncated") }
        let questions = try reader.u16(), answers = try reader.u16()
        _ = try reader.u16(); _ = try reader.u16()  // authority and additional: not read
        guard questions == 1 else { throw DNSError(.malformed, "\(questions) questions in the reply") }
        let asked = try reader.name()
        let askedType = try reader.u16(), askedClass = try reader.u16()
        let wanted = try canonical(name)
        guard asked == wanted, askedType == typeSRV, askedClass == classIN else {
            throw DNSError(.malformed, "the reply's question is not the one asked")
        }
        switch UInt8(flags & 0xF) {
        case 0: break
        case 3: return []  // NXDOMAIN: no such name
        case let rcode: throw DNSError(.serverFailure(rcode: rcode), "the server answered rcode \(rcode)")
        }
        var records: [SRVRecord] = []
        for _ in 0..<answers {
            let owner = try reader.name()
            let type = try reader.u16(), rrClass = try reader.u16()
            _ = try reader.u32()  // TTL: the caller caches for its own time
            let length = Int(try reader.u16())
            let end = reader.offset + length
            guard end <= reply.count else { throw DNSError(.malformed, "a record runs past the reply") }
            if type == typeSRV && rrClass == classIN && owner == wanted {
                let priority = try reader.u16(), weight = try reader.u16(), port = try reader.u16()
                let target = try reader.name()
                guard reader.offset == end else { throw DNSError(.malformed, "an SRV record's length is not its content's") }
                records.append(SRVRecord(priority: priority, weight: weight, port: port, target: target))
            }
            reader.offset = end
        }
        return records
    }

    /// `name` as `Reader.name()` returns names: lowercase, no final dot.
    static func canonical(_ name: String) throws(DNSError) -> String {
        var reader = Reader(bytes: try encode(name: name))
        return try reader.name()
    }

    struct Reader {
        let bytes: [UInt8]
        var offset = 0

        mutating func u16() throws(DNSError) -> UInt16 {
            guard offset + 2 <= bytes.count else { throw DNSError(.malformed, "the reply ends inside a field") }
            defer { offset += 2 }
            return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
        }

        mutating func u32() throws(DNSError) -> UInt32 {
            let high = try u16(), low = try u16()
            return UInt32(high) << 16 | UInt32(low)
        }

        /// A name at `offset`, following compression pointers (each must point before
        /// the label that holds it, so they cannot loop); `offset` ends after the name
        /// as written here. Lowercase, labels joined by dots, no final dot; the root is "".
        mutating func name() throws(DNSError) -> String {
            var labels: [String] = []
            var position = offset
            var resumeAt: Int?
            var total = 0
            while true {
                guard position < bytes.count else { throw DNSError(.malformed, "the reply ends inside a name") }
                let length = Int(bytes[position])
                switch length & 0xC0 {
                case 0xC0:
                    guard position + 1 < bytes.count else { throw DNSError(.malformed, "the reply ends inside a name") }
                    let target = (length & 0x3F) << 8 | Int(bytes[position + 1])
                    guard target < position else { throw DNSError(.malformed, "a compression pointer that does not point back") }
                    if resumeAt == nil { resumeAt = position + 2 }
                    position = target
                case 0x00:
                    if length == 0 {
                        offset = resumeAt ?? position + 1
                        return labels.joined(separator: ".")
                    }
                    guard position + 1 + length <= bytes.count else { throw DNSError(.malformed, "a label runs past the reply") }
                    total += length + 1
                    guard total <= 255 else { throw DNSError(.malformed, "a name longer than 255 bytes") }
                    labels.append(String(decoding: bytes[(position + 1)...(position + length)], as: UTF8.self).lowercased())
                    position += 1 + length
                default:
                    throw DNSError(.malformed, "a label type that is not defined")
                }
            }
        }
    }
}
