/// How much of a new mail a device's pushes show to Apple's and Google's push services
/// (docs/privacy.md). The cases are ordered by how little the push service learns, so
/// an operator's floor (`privacy.minimum_mode`) is a maximum of two modes.
public enum PrivacyMode: Int, Sendable, Comparable, CaseIterable {
    /// Sender and subject in the visible alert, the sync key beside it (the original
    /// contract's payload).
    case preview = 0
    /// "New mail" (or "N new messages") and the badge: no sender, subject or sync key.
    case generic = 1
    /// A generic visible alert with `mutable-content`, and the preview, badge and sync
    /// key encrypted to the device's P-256 key (PreviewEncryption).
    case encrypted = 2
    /// The notification id alone: the app fetches the content from ENS.
    case secure = 3
    /// Exchange Online (Graph) only: Microsoft encrypts the new mail's sender and
    /// subject to the device's own certificate, and ENS forwards that ciphertext
    /// without being able to open it (docs/privacy.md). Apple and Google see what they
    /// see in `encrypted`; ENS itself sees nothing.
    case blind = 4

    public static func < (lhs: PrivacyMode, rhs: PrivacyMode) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The API's and the configuration's word for the mode.
    public var name: String {
        switch self {
        case .preview: "preview"
        case .generic: "generic"
        case .encrypted: "encrypted"
        case .secure: "secure"
        case .blind: "blind"
        }
    }

    public init?(name: String) {
        guard let mode = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = mode
    }

    /// The modes an operator may set as the floor (`privacy.minimum_mode`): `blind`
    /// exists only where Graph can encrypt to a device's certificate, so it cannot be
    /// asked of every device.
    public static let floors: [PrivacyMode] = [.preview, .generic, .encrypted, .secure]

    /// The mode a device's pushes actually use: its own, raised to the operator's
    /// floor. `encrypted` and `blind` need the device's key (its P-256 key, its
    /// certificate); a device without one gets `secure`, stricter, never weaker.
    public func raised(to floor: PrivacyMode, hasPreviewKey: Bool) -> PrivacyMode {
        precondition(floor != .blind, "blind is a device's choice, never an operator's floor")
        let mode = max(self, floor)
        return (mode == .encrypted || mode == .blind) && !hasPreviewKey ? .secure : mode
    }
}
