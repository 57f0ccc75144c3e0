extension StringProtocol {
    /// Trims any of the Unicode scalars in `set` from both ends. (Scalars, not
    /// Characters: "\r\n" is one Character, so a Character set would miss a lone "\n".)
    public func trimmingCharacters(in set: String) -> String {
        let trim = Set(set.unicodeScalars)
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !trim.contains($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !trim.contains($0) })!
        return String(scalars[first...last])
    }
}
