import ENSTestSupport
import Foundation
import Testing
@testable import ENSModel

@Suite struct TimestampTests {
    /// 9999-12-31 23:59:59.999 UTC, the last instant both formats can write.
    static let lastMillisecond: Int64 = 253_402_300_799_999

    @Test func epoch() {
        let epoch = Timestamp(millisecondsSinceEpoch: 0)
        #expect(epoch.apiString == "01/01/1970 00:00:00.000")
        #expect(epoch.databaseString == "1970-01-01 00:00:00.000")
        #expect(Timestamp(apiString: "01/01/1970 00:00:00.000") == epoch)
        #expect(Timestamp(databaseString: "1970-01-01 00:00:00") == epoch)
    }

    @Test func knownInstants() {
        // 2024-02-29T12:34:56.789Z = 1709210096789 ms (date -u -d @1709210096).
        let leapDay = Timestamp(millisecondsSinceEpoch: 1_709_210_096_789)
        #expect(leapDay.apiString == "02/29/2024 12:34:56.789")
        #expect(leapDay.databaseString == "2024-02-29 12:34:56.789")
        #expect(Timestamp(apiString: "02/29/2024 12:34:56.789") == leapDay)
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.789") == leapDay)

        // 2000-03-01T00:00:00.000Z = 951868800 s.
        #expect(Timestamp(apiString: "03/01/2000 00:00:00.000")?.millisecondsSinceEpoch == 951_868_800_000)
        // 2038-01-19T03:14:08Z, one second past the 32-bit time_t limit.
        #expect(Timestamp(apiString: "01/19/2038 03:14:08.000")?.millisecondsSinceEpoch == 2_147_483_648_000)
        let last = Timestamp(millisecondsSinceEpoch: Self.lastMillisecond)
        #expect(last.apiString == "12/31/9999 23:59:59.999")
        #expect(last.databaseString == "9999-12-31 23:59:59.999")
        #expect(Timestamp(apiString: "12/31/9999 23:59:59.999") == last)
    }

    @Test func roundTripsBothFormats() {
        var generator = SeededGenerator(seed: 0x71AE)
        var samples: [Int64] = [0, 1, 999, 1000, 86_399_999, 86_400_000, 951_782_400_000, 1_709_164_800_000, Self.lastMillisecond]
        for _ in 0..<2000 { samples.append(Int64.random(in: 0...Self.lastMillisecond, using: &generator)) }
        for milliseconds in samples {
            let timestamp = Timestamp(millisecondsSinceEpoch: milliseconds)
            #expect(Timestamp(apiString: timestamp.apiString) == timestamp, "\(milliseconds)")
            #expect(Timestamp(databaseString: timestamp.databaseString) == timestamp, "\(milliseconds)")
            #expect(timestamp.apiString.utf8.count == 23)
            #expect(timestamp.databaseString.utf8.count == 23)
        }
    }

    @Test func apiStringMatchesFoundation() {
        let formatter = DateFormatter()
        formatter.calendar = Calendar(identifier: .gregorian)
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "MM/dd/yyyy HH:mm:ss.SSS"
        let databaseFormatter = DateFormatter()
        databaseFormatter.calendar = Calendar(identifier: .gregorian)
        databaseFormatter.locale = Locale(identifier: "en_US_POSIX")
        databaseFormatter.timeZone = TimeZone(identifier: "UTC")
        databaseFormatter.dateFormat = "yyyy-MM-dd HH:mm:ss.SSS"

        var generator = SeededGenerator(seed: 0xDA7E)
        var samples: [Int64] = [0, 951_868_799_999, 951_868_800_000, 4_107_542_400_000, 1_709_210_096_789]
        for _ in 0..<300 { samples.append(Int64.random(in: 0...Self.lastMillisecond, using: &generator)) }
        for _ in 0..<300 { samples.append(Int64.random(in: 0...4_102_444_800_000, using: &generator)) }  // up to 2100
        for milliseconds in samples {
            // A quarter millisecond past the instant, so that neither floating-point
            // error nor truncation vs. rounding in the formatter moves the .SSS field.
            let date = Date(timeIntervalSince1970: (Double(milliseconds) + 0.25) / 1000)
            let timestamp = Timestamp(millisecondsSinceEpoch: milliseconds)
            #expect(timestamp.apiString == formatter.string(from: date), "\(milliseconds) ms")
            #expect(timestamp.databaseString == databaseFormatter.string(from: date), "\(milliseconds) ms")
            #expect(Timestamp(apiString: formatter.string(from: date)) == timestamp)
        }
    }

    @Test func leapYears() {
        #expect(Timestamp(apiString: "02/29/2024 00:00:00.000") != nil)
        #expect(Timestamp(apiString: "02/29/2000 00:00:00.000") != nil, "divisible by 400")
        #expect(Timestamp(apiString: "02/29/1972 00:00:00.000") != nil)
        #expect(Timestamp(apiString: "02/29/2023 00:00:00.000") == nil)
        #expect(Timestamp(apiString: "02/29/2100 00:00:00.000") == nil, "divisible by 100, not 400")
        #expect(Timestamp(apiString: "02/29/1900 00:00:00.000") == nil)
        #expect(Timestamp(apiString: "02/30/2024 00:00:00.000") == nil)
        #expect(Timestamp(apiString: "02/28/2023 23:59:59.999")!.adding(seconds: 0).millisecondsSinceEpoch + 1
            == Timestamp(apiString: "03/01/2023 00:00:00.000")!.millisecondsSinceEpoch)
        #expect(Timestamp(databaseString: "2024-02-29 00:00:00") != nil)
        #expect(Timestamp(databaseString: "2023-02-29 00:00:00") == nil)
    }

    @Test func monthLengths() {
        let lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        for (index, length) in lengths.enumerated() {
            let month = String(format: "%02d", index + 1)
            #expect(Timestamp(apiString: "\(month)/\(length)/2023 00:00:00.000") != nil, "month \(month)")
            #expect(Timestamp(apiString: "\(month)/\(length + 1)/2023 00:00:00.000") == nil, "month \(month)")
            #expect(Timestamp(apiString: "\(month)/00/2023 00:00:00.000") == nil, "month \(month)")
        }
    }

    @Test(arguments: [
        "", "01/01/1970", "01/01/1970 00:00:00", "01/01/1970 00:00:00.00", "01/01/1970 00:00:00.0000",
        "1/01/1970 00:00:00.000", "01/01/70 00:00:00.000", "01-01-1970 00:00:00.000", "01/01/1970T00:00:00.000",
        "01/01/1970 00-00-00.000", "01/01/1970 00:00:00,000", "1970-01-01 00:00:00.000", " 01/01/1970 00:00:00.00",
        "01/01/1970 00:00:00.000Z", "+1/01/1970 00:00:00.000", "-1/01/1970 00:00:00.000", "0a/01/1970 00:00:00.000",
        "01/01/1970 0 :00:00.000", "01/01/1970 00:00:00. 00", "01/01/1970 00:00:00.-00", "01/01/197٠ 00:00:00.000",
        "13/01/2024 00:00:00.000", "00/01/2024 00:00:00.000", "01/32/2024 00:00:00.000", "01/01/2024 24:00:00.000",
        "01/01/2024 00:60:00.000", "01/01/2024 00:00:60.000", "01/01/1969 23:59:59.999", "01/01/0000 00:00:00.000",
        "99/99/9999 99:99:99.999",
    ])
    func badAPIStringsAreRefused(text: String) {
        #expect(Timestamp(apiString: text) == nil)
    }

    @Test func databaseFractions() {
        let base = Timestamp(databaseString: "2024-02-29 12:34:56")!
        #expect(base.apiString == "02/29/2024 12:34:56.000")
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.5")?.millisecondsSinceEpoch == base.millisecondsSinceEpoch + 500)
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.12")?.millisecondsSinceEpoch == base.millisecondsSinceEpoch + 120)
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.123")?.millisecondsSinceEpoch == base.millisecondsSinceEpoch + 123)
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.000")?.millisecondsSinceEpoch == base.millisecondsSinceEpoch)
        // DATETIME(6) microseconds are truncated to milliseconds.
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.123999")?.millisecondsSinceEpoch == base.millisecondsSinceEpoch + 123)
    }

    @Test(arguments: [
        "", "2024-02-29", "2024-02-29 12:34", "2024-02-29 12:34:5", "2024-02-29 12:34:56.", "2024-02-29T12:34:56",
        "2024/02/29 12:34:56", "24-02-29 12:34:56.000", "2024-2-29 12:34:56.000", "2024-02-29 12:34:56,123",
        "2024-02-29 12:34:56.x", "2024-02-29 12:34:56.1x", "2024-02-29 12:34:56.-12", "2024-13-01 00:00:00",
        "2024-00-01 00:00:00", "2024-01-00 00:00:00", "2024-01-01 24:00:00", "1969-12-31 23:59:59.999",
        "0000-00-00 00:00:00", "2024-02-29 12:34:56 ", "2024-02-29 12:34:56Z",
    ])
    func badDatabaseStringsAreRefused(text: String) {
        #expect(Timestamp(databaseString: text) == nil)
    }

    @Test func trailingGarbageAfterThreeFractionDigits() {
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.123garbage") == nil)
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.1234567") == nil)
        // DATETIME(6) values keep their milliseconds.
        #expect(Timestamp(databaseString: "2024-02-29 12:34:56.123999")?.databaseString == "2024-02-29 12:34:56.123")
    }

    @Test func instantsBefore1970BreakDownCorrectly() {
        #expect(Timestamp(millisecondsSinceEpoch: -1).apiString == "12/31/1969 23:59:59.999")
    }

    @Test func ordering() {
        var generator = SeededGenerator(seed: 0x0D)
        let values = (0..<200).map { _ in Int64.random(in: 0...Self.lastMillisecond, using: &generator) }
        let sorted = values.map(Timestamp.init(millisecondsSinceEpoch:)).sorted()
        #expect(sorted.map(\.millisecondsSinceEpoch) == values.sorted())
        // Both text forms sort like the instants they name (the database one lexically).
        #expect(sorted.map(\.databaseString) == sorted.map(\.databaseString).sorted())

        let a = Timestamp(apiString: "12/31/2023 23:59:59.999")!
        let b = Timestamp(apiString: "01/01/2024 00:00:00.000")!
        #expect(a < b)
        #expect(!(b < a))
        #expect(a <= a && a >= a)
        #expect(b.millisecondsSinceEpoch - a.millisecondsSinceEpoch == 1)
        #expect(max(a, b) == b)
    }

    @Test func addingSeconds() {
        let start = Timestamp(apiString: "02/28/2024 23:59:30.250")!
        #expect(start.adding(seconds: 30).apiString == "02/29/2024 00:00:00.250")
        #expect(start.adding(seconds: 86_400 + 30).apiString == "03/01/2024 00:00:00.250")
        #expect(start.adding(seconds: -86_400).apiString == "02/27/2024 23:59:30.250")
        #expect(start.adding(seconds: 0) == start)
    }

    @Test func hashableAndEquatable() {
        let a = Timestamp(millisecondsSinceEpoch: 42)
        let b = Timestamp(apiString: "01/01/1970 00:00:00.042")!
        #expect(a == b)
        #expect(Set([a, b, Timestamp(millisecondsSinceEpoch: 43)]).count == 2)
    }

    @Test func nowIsPlausible() {
        let now = Timestamp.now()
        // After 2024-01-01 and before 2200: a sanity check on the clock call, not timing.
        #expect(now > Timestamp(apiString: "01/01/2024 00:00:00.000")!)
        #expect(now < Timestamp(apiString: "01/01/2200 00:00:00.000")!)
        #expect(Timestamp(apiString: now.apiString) == now)
    }
}

/// Retry-After as push services and Graph may send it: seconds or an HTTP-date.
@Suite struct RetryAfterTests {
    /// IMF-fixdate read the same as Python's email.utils (an independent parser) reads it.
    @Test func httpDatesMatchPythonsParser() throws {
        let dates = ["Sun, 06 Nov 1994 08:49:37 GMT", "Wed, 25 Nov 2026 12:00:00 GMT",
                     "Thu, 29 Feb 2024 23:59:59 GMT", "Fri, 31 Dec 1999 00:00:00 GMT"]
        let expected = try Shell.python("""
            import sys
            from email.utils import parsedate_to_datetime
            print(" ".join(str(int(parsedate_to_datetime(d).timestamp())) for d in sys.argv[1:]))
            """, dates).split(separator: " ").map { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        for (date, seconds) in zip(dates, expected) {
            #expect(Timestamp(httpDate: date)?.millisecondsSinceEpoch == seconds.map { $0 * 1000 }, "\(date)")
        }
        for bad in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC",
                    "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT", "", "GMT"] {
            #expect(Timestamp(httpDate: bad) == nil, "\(bad)")
        }
    }

    @Test func secondsDatesAndGarbage() {
        let now = Timestamp(millisecondsSinceEpoch: 1_795_600_000_000)  // 2026-11-25T09:46:40Z
        let day = Duration.seconds(86_400)
        #expect(RetryAfter.parse("120", now: now, maximum: day) == .seconds(120))
        #expect(RetryAfter.parse(" 7 ", now: now, maximum: day) == .seconds(7))
        #expect(RetryAfter.parse("999999", now: now, maximum: day) == day)
        #expect(RetryAfter.parse("99999999999999999999999", now: now, maximum: day) == day)
        #expect(RetryAfter.parse("Wed, 25 Nov 2026 09:48:40 GMT", now: now, maximum: day) == .seconds(120))
        #expect(RetryAfter.parse("Wed, 25 Nov 2026 09:00:00 GMT", now: now, maximum: day) == .zero, "a date in the past: no wait")
        for garbage in [nil, "", "-5", "soon", "1.5", "Wed, 25 Nov 2026"] as [String?] {
            #expect(RetryAfter.parse(garbage, now: now, maximum: day) == nil, "\(garbage ?? "nil")")
        }
    }
}
