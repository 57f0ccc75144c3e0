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

    public static func < (lhs: PrivacyMode, rhs: PrivacyMode) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The API's and the configuration's word for the mode.
    public var name: String {
        switch self {
        case .preview: "preview"
        case .generic: "generic"
        case .encrypted: "encrypted"
        case .secure: "secure"
        }
    }

    public init?(name: String) {
        guard let mode = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = mode
    }

    /// The mode a device's pushes actually use: its own, raised to the operator's
    /// floor. `encrypted` needs the device's key; a device without one that the floor
    /// raises to `encrypted` gets `secure`, the next stricter mode, never a weaker one.
    public func raised(to floor: PrivacyMode, hasPreviewKey: Bool) -> PrivacyMode {
        let mode = max(self, floor)
        return mode == .encrypted && !hasPreviewKey ? .secure : mode
    }
}
