internal import POSIX
#if canImport(Glibc)
import Glibc
#endif

/// A UTC instant with millisecond precision, convertible to the API's
/// `MM/dd/yyyy HH:mm:ss.SSS` and to MariaDB's `yyyy-MM-dd HH:mm:ss.SSS` (sessions run
/// with time_zone '+00:00', so DATETIME(3) columns hold UTC).
public struct Timestamp: Sendable, Comparable, Hashable {
    public let millisecondsSinceEpoch: Int64

    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = millisecondsSinceEpoch
    }

    public static func now() -> Timestamp {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Timestamp(millisecondsSinceEpoch: Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    /// This instant moved by `duration` (to the millisecond).
    public func adding(_ duration: Duration) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: millisecondsSinceEpoch + Int64(duration.wholeMilliseconds))
    }

    /// This instant moved back by `duration` (to the millisecond).
    public func subtracting(_ duration: Duration) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: millisecondsSinceEpoch - Int64(duration.wholeMilliseconds))
    }

    public func adding(seconds: Int64) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: millisecondsSinceEpoch + seconds * 1000)
    }

    /// Parses the API's `MM/dd/yyyy HH:mm:ss.SSS` (UTC); nil for anything else.
    public init?(apiString text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 23, bytes[2] == 0x2F, bytes[5] == 0x2F, bytes[10] == 0x20,
              bytes[13] == 0x3A, bytes[16] == 0x3A, bytes[19] == 0x2E,
              let month = Self.number(bytes, 0, 2), let day = Self.number(bytes, 3, 2), let year = Self.number(bytes, 6, 4),
              let hour = Self.number(bytes, 11, 2), let minute = Self.number(bytes, 14, 2),
              let second = Self.number(bytes, 17, 2), let millisecond = Self.number(bytes, 20, 3) else { return nil }
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second, millisecond: millisecond)
    }

    /// Parses an HTTP-date in its preferred form, IMF-fixdate (RFC 9110 §5.6.7):
    /// `Sun, 06 Nov 1994 08:49:37 GMT`. The obsolete RFC 850 and asctime forms are refused.
    public init?(httpDate text: String) {
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        let parts = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), days.contains(String(parts[0].dropLast())),
              parts[5] == "GMT", let month = months.firstIndex(of: parts[2]) else { return nil }
        let day = Array(parts[1].utf8), year = Array(parts[3].utf8), time = Array(parts[4].utf8)
        guard day.count == 2, year.count == 4, time.count == 8, time[2] == 0x3A, time[5] == 0x3A,
              let dayNumber = Self.number(day, 0, 2), let yearNumber = Self.number(year, 0, 4),
              let hour = Self.number(time, 0, 2), let minute = Self.number(time, 3, 2), let second = Self.number(time, 6, 2) else { return nil }
        self.init(year: yearNumber, month: month + 1, day: dayNumber, hour: hour, minute: minute, second: second, millisecond: 0)
    }

    /// Parses MariaDB's `yyyy-MM-dd HH:mm:ss[.SSS]`.
    public init?(databaseString text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count >= 19, bytes[4] == 0x2D, bytes[7] == 0x2D, bytes[10] == 0x20, bytes[13] == 0x3A, bytes[16] == 0x3A,
              let year = Self.number(bytes, 0, 4), let month = Self.number(bytes, 5, 2), let day = Self.number(bytes, 8, 2),
              let hour = Self.number(bytes, 11, 2), let minute = Self.number(bytes, 14, 2), let second = Self.number(bytes, 17, 2) else { return nil }
        var millisecond = 0
        if bytes.count > 19 {
            // DATETIME(3) has three fraction digits; accept up to six (DATETIME(6)) and
            // keep milliseconds. Anything else after the seconds is refused.
            guard bytes[19] == 0x2E, bytes.count >= 21, bytes.count <= 26,
                  bytes[20...].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            let digits = Array(bytes[20...].prefix(3))
            guard let fraction = Self.number(digits, 0, digits.count) else { return nil }
            millisecond = fraction * [1, 100, 10, 1][digits.count]
        }
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second, millisecond: millisecond)
    }

    /// Parses ISO 8601 / RFC 3339 date-times as Microsoft Graph writes them:
    /// `yyyy-MM-ddTHH:mm:ss`, any number of fraction digits (Graph sends 7; milliseconds
    /// are kept), then `Z` or an offset `±hh:mm`.
    public init?(isoString text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40, bytes[4] == 0x2D, bytes[7] == 0x2D, bytes[10] == 0x54 || bytes[10] == 0x74,
              bytes[13] == 0x3A, bytes[16] == 0x3A,
              let year = Self.number(bytes, 0, 4), let month = Self.number(bytes, 5, 2), let day = Self.number(bytes, 8, 2),
              let hour = Self.number(bytes, 11, 2), let minute = Self.number(bytes, 14, 2), let second = Self.number(bytes, 17, 2) else { return nil }
        var index = 19
        var millisecond = 0
        if bytes[index] == 0x2E {
            index += 1
            let start = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > start else { return nil }
            let digits = Array(bytes[start..<min(index, start + 3)])
            guard let fraction = Self.number(digits, 0, digits.count) else { return nil }
            millisecond = fraction * [1, 100, 10, 1][digits.count]
        }
        var offsetSeconds: Int64 = 0
        let rest = bytes[index...]
        if rest.count == 1 && (rest.first == 0x5A || rest.first == 0x7A) {
            offsetSeconds = 0
        } else {
            let zone = Array(rest)
            guard zone.count == 6, zone[0] == 0x2B || zone[0] == 0x2D, zone[3] == 0x3A,
                  let hours = Self.number(zone, 1, 2), let minutes = Self.number(zone, 4, 2), hours < 24, minutes < 60 else { return nil }
            offsetSeconds = Int64(hours * 3600 + minutes * 60) * (zone[0] == 0x2D ? -1 : 1)
        }
        guard let local = Timestamp(year: year, month: month, day: day, hour: hour, minute: minute, second: second, millisecond: millisecond) else {
            return nil
        }
        self = local.adding(seconds: -offsetSeconds)
    }

    private init?(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, millisecond: Int) {
        guard (1970...9999).contains(year), (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 60, millisecond < 1000 else { return nil }
        let days = Self.daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86400 + Int64(hour * 3600 + minute * 60 + second)
        self.init(millisecondsSinceEpoch: seconds * 1000 + Int64(millisecond))
    }

    public var apiString: String {
        let (year, month, day, hour, minute, second, millisecond) = components
        return Self.written { bytes in
            Self.append(month, 2, to: &bytes); bytes.append(UInt8(ascii: "/"))
            Self.append(day, 2, to: &bytes); bytes.append(UInt8(ascii: "/"))
            Self.append(year, 4, to: &bytes); bytes.append(UInt8(ascii: " "))
            Self.appendTime(hour, minute, second, millisecond, to: &bytes)
        }
    }

    /// UTC in ISO 8601 with milliseconds: `yyyy-MM-ddTHH:mm:ss.SSSZ` (what Graph takes).
    public var isoString: String {
        let (year, month, day, hour, minute, second, millisecond) = components
        return Self.written { bytes in
            Self.appendDate(year, month, day, to: &bytes); bytes.append(UInt8(ascii: "T"))
            Self.appendTime(hour, minute, second, millisecond, to: &bytes); bytes.append(UInt8(ascii: "Z"))
        }
    }

    public var databaseString: String {
        let (year, month, day, hour, minute, second, millisecond) = components
        return Self.written { bytes in
            Self.appendDate(year, month, day, to: &bytes); bytes.append(UInt8(ascii: " "))
            Self.appendTime(hour, minute, second, millisecond, to: &bytes)
        }
    }

    // Written as bytes: every callback binds a few of these, and string interpolation
    // of padded numbers cost more than the rest of the row's binding.
    private static func written(_ body: (inout [UInt8]) -> Void) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        body(&bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func appendDate(_ year: Int, _ month: Int, _ day: Int, to bytes: inout [UInt8]) {
        append(year, 4, to: &bytes); bytes.append(UInt8(ascii: "-"))
        append(month, 2, to: &bytes); bytes.append(UInt8(ascii: "-"))
        append(day, 2, to: &bytes)
    }

    private static func appendTime(_ hour: Int, _ minute: Int, _ second: Int, _ millisecond: Int, to bytes: inout [UInt8]) {
        append(hour, 2, to: &bytes); bytes.append(UInt8(ascii: ":"))
        append(minute, 2, to: &bytes); bytes.append(UInt8(ascii: ":"))
        append(second, 2, to: &bytes); bytes.append(UInt8(ascii: "."))
        append(millisecond, 3, to: &bytes)
    }

    /// `value` in decimal, zero-padded to `width` digits (wider if it needs more).
    private static func append(_ value: Int, _ width: Int, to bytes: inout [UInt8]) {
        var limit = 1
        for _ in 0..<width { limit *= 10 }
        guard value >= 0, value < limit else {
            // Outside what a timestamp writes (a year past 9999 or before 0): as before.
            let text = String(value)
            bytes.append(contentsOf: String(repeating: "0", count: max(0, width - text.count)).utf8)
            bytes.append(contentsOf: text.utf8)
            return
        }
        var divisor = limit / 10
        while divisor > 0 {
            bytes.append(UInt8(truncatingIfNeeded: 0x30 + value / divisor % 10))
            divisor /= 10
        }
    }

    private var components: (Int, Int, Int, Int, Int, Int, Int) {
        // Floor division, so instants before 1970 break down correctly too.
        let (secondsFloor, milliseconds) = Self.floorDivide(Int(millisecondsSinceEpoch), 1000)
        let (days, secondsOfDay) = Self.floorDivide(secondsFloor, 86400)
        let (year, month, day) = Self.civilFromDays(days)
        return (year, month, day, secondsOfDay / 3600, secondsOfDay % 3600 / 60, secondsOfDay % 60, milliseconds)
    }

    private static func floorDivide(_ value: Int, _ divisor: Int) -> (Int, Int) {
        let remainder = ((value % divisor) + divisor) % divisor
        return ((value - remainder) / divisor, remainder)
    }


    private static func number(_ bytes: [UInt8], _ start: Int, _ length: Int) -> Int? {
        guard length > 0, start + length <= bytes.count else { return nil }
        var value = 0
        for byte in bytes[start..<(start + length)] {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        return value
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    private static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
