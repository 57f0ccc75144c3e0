/// Where a spooled notification lives: its log segment and the byte offset of its
/// record. Sorting entries gives arrival order. Eight bytes, because the delivery queue
/// keeps one per spooled notification (100,000 of them must fit in the RSS budget).
public struct SpoolEntry: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let segment: UInt32
    public let offset: UInt32

    public init(segment: UInt32, offset: UInt32) {
        self.segment = segment
        self.offset = offset
    }

    public static func < (lhs: SpoolEntry, rhs: SpoolEntry) -> Bool {
        (lhs.segment, lhs.offset) < (rhs.segment, rhs.offset)
    }

    public var description: String { "\(segment):\(offset)" }
}
