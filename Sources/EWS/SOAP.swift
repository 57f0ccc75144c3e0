internal import XML

/// The XML namespaces EWS and Autodiscover use. All of them are `http://` URIs: the
/// `https://` variants printed on some Microsoft pages make Exchange answer with an
/// error (docs/exchange.md, "Namespaces").
public enum Namespace {
    public static let soap = "http://schemas.xmlsoap.org/soap/envelope/"
    public static let messages = "http://schemas.microsoft.com/exchange/services/2006/messages"
    public static let types = "http://schemas.microsoft.com/exchange/services/2006/types"
    public static let errors = "http://schemas.microsoft.com/exchange/services/2006/errors"
    public static let poxRequest = "http://schemas.microsoft.com/exchange/autodiscover/outlook/requestschema/2006"
    public static let poxResponse = "http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006"
    public static let poxOutlookResponse = "http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a"
    public static let autodiscover = "http://schemas.microsoft.com/exchange/2010/Autodiscover"
    public static let addressing = "http://www.w3.org/2005/08/addressing"
    public static let schemaInstance = "http://www.w3.org/2001/XMLSchema-instance"
}

/// Builds the SOAP 1.1 documents ENS sends. Values are escaped here and nowhere else.
public enum SOAP {
    /// `text` escaped for element content and attribute values.
    public static func escape(_ text: String) -> String {
        // Byte by byte (UTF-8 continuation bytes are never one of these), and most
        // values (item ids, change keys) need nothing: they come back as they are.
        func needsWork(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "&"), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\""), UInt8(ascii: "'"): true
            case 0x09, 0x0a, 0x0d: false
            case 0..<0x20: true
            default: false
            }
        }
        guard text.utf8.contains(where: needsWork) else { return text }
        var escaped: [UInt8] = []
        escaped.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "&"): escaped.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): escaped.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): escaped.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\""): escaped.append(contentsOf: "&quot;".utf8)
            case UInt8(ascii: "'"): escaped.append(contentsOf: "&apos;".utf8)
            case 0x09, 0x0a, 0x0d: escaped.append(byte)
            // XML 1.0 cannot carry most control characters, even escaped.
            case 0..<0x20: continue
            default: escaped.append(byte)
            }
        }
        return String(decoding: escaped, as: UTF8.self)
    }

    /// An EWS request: envelope, RequestServerVersion header, and `body` (already XML).
    static func ewsEnvelope(version: EWSVersion, body: String) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="utf-8"?>
            <soap:Envelope xmlns:soap="\(Namespace.soap)" xmlns:m="\(Namespace.messages)" xmlns:t="\(Namespace.types)">\
            <soap:Header><t:RequestServerVersion Version="\(version.rawValue)"/></soap:Header>\
            <soap:Body>\(body)</soap:Body></soap:Envelope>
            """.utf8)
    }

    /// The answer to a SendNotification callback.
    public static func sendNotificationResult(unsubscribe: Bool) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="utf-8"?>
            <soap:Envelope xmlns:soap="\(Namespace.soap)"><soap:Body>\
            <m:SendNotificationResult xmlns:m="\(Namespace.messages)">\
            <m:SubscriptionStatus>\(unsubscribe ? "Unsubscribe" : "OK")</m:SubscriptionStatus>\
            </m:SendNotificationResult></soap:Body></soap:Envelope>
            """.utf8)
    }

    /// The SOAP body element of a parsed envelope (any prefix; namespace checked).
    static func body(of envelope: XMLTreeElement) -> XMLTreeElement? {
        guard envelope.namespace == Namespace.soap, envelope.name == "Envelope" else { return nil }
        return envelope.child(Namespace.soap, "Body")
    }

    /// The EWS ResponseCode of a SOAP Fault, if the body is one.
    static func faultCode(_ body: XMLTreeElement) -> String? {
        guard let fault = body.child(Namespace.soap, "Fault") else { return nil }
        if let code = fault.descendants(Namespace.errors, "ResponseCode").first ?? fault.descendants(Namespace.types, "ResponseCode").first {
            return code.trimmedText
        }
        return fault.children.first { $0.name == "faultcode" }?.trimmedText ?? "SOAP fault"
    }
}

/// The `RequestServerVersion` values ENS can send, oldest first. Push subscriptions need
/// Exchange2007_SP1 or later; Microsoft advises sending the oldest version that has the
/// features you use, and a server refuses versions it does not know.
public enum EWSVersion: String, Sendable, CaseIterable, Comparable {
    case exchange2007SP1 = "Exchange2007_SP1"
    case exchange2010 = "Exchange2010"
    case exchange2010SP1 = "Exchange2010_SP1"
    case exchange2010SP2 = "Exchange2010_SP2"
    case exchange2013 = "Exchange2013"
    case exchange2013SP1 = "Exchange2013_SP1"
    case exchange2016 = "Exchange2016"

    public static let `default` = EWSVersion.exchange2010SP2

    /// The contract's `exchVersion` integer: 0–6 index this list (0 = Exchange2007_SP1,
    /// 6 = Exchange2016); a product year (2007, 2010, 2013, 2016, 2019) names the
    /// newest schema of that release. Anything else (or nothing) uses the default.
    public init(exchVersion: Int?) {
        switch exchVersion {
        case let index? where index >= 0 && index < Self.allCases.count: self = Self.allCases[index]
        case 2007: self = .exchange2007SP1
        case 2010: self = .exchange2010SP2
        case 2013: self = .exchange2013SP1
        case 2016, 2019: self = .exchange2016
        default: self = .default
        }
    }

    /// The next older version to try after the server refused this one.
    public var older: EWSVersion? {
        let all = Self.allCases
        let index = all.firstIndex(of: self)!
        return index == 0 ? nil : all[index - 1]
    }

    public static func < (lhs: EWSVersion, rhs: EWSVersion) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}
