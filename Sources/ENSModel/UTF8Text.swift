extension String {
    /// `bytes` as a String if they are valid UTF-8, else nil: what
    /// `String(validating:as:)` does, without its cost. That one is generic over the
    /// collection, and for an ArraySlice it is not specialised: every call looked up
    /// type metadata at run time, which cost the sender more than checking the bytes
    /// (every JSON string of every push goes through here).
    public static func validatedUTF8(_ bytes: ArraySlice<UInt8>) -> String? {
        guard let text = try? UTF8Span(validating: bytes.span) else { return nil }
        return String(copying: text)
    }

    public static func validatedUTF8(_ bytes: [UInt8]) -> String? {
        validatedUTF8(bytes[...])
    }
}
