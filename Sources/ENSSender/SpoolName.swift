/// A spool file name (`<15-digit ms>-<6-digit counter>-<32-hex id>`) held in 32 bytes
/// inline instead of a heap string: the delivery queue keeps one per spooled
/// notification, and with 100,000 spooled the difference is tens of megabytes.
struct SpoolName: Sendable, Equatable {
    let milliseconds: Int64
    let counter: Int32
    let idHigh: UInt64
    let idLow: UInt64

    init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].utf8.count == 15, parts[1].utf8.count == 6, parts[2].utf8.count == 32,
              parts[0].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), parts[1].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let milliseconds = Int64(parts[0]), let counter = Int32(parts[1]),
              parts[2].utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }),
              let high = UInt64(parts[2].prefix(16), radix: 16), let low = UInt64(parts[2].suffix(16), radix: 16) else { return nil }
        self.milliseconds = milliseconds
        self.counter = counter
        self.idHigh = high
        self.idLow = low
    }

    var text: String {
        func padded(_ text: String, _ width: Int) -> String { String(repeating: "0", count: max(0, width - text.utf8.count)) + text }
        return padded(String(milliseconds), 15) + "-" + padded(String(counter), 6) + "-"
            + padded(String(idHigh, radix: 16), 16) + padded(String(idLow, radix: 16), 16)
    }
}
