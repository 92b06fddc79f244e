import Foundation

/// RFC 3339 timestamps in UTC (`2026-11-29T12:00:00Z`, or with milliseconds
/// `2026-11-29T12:00:00.123Z`), as messages and log lines carry them: written digit by digit
/// (several per message, so the format styles' cost showed), proleptic Gregorian calendar, years
/// 0000 to 9999.
public enum RFC3339 {
    /// - Parameter milliseconds: append `.SSS`; otherwise whole seconds (rounded down).
    public static func format(_ date: Date, milliseconds: Bool = false) -> String {
        let totalMilliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let seconds = totalMilliseconds >= 0 ? totalMilliseconds / 1000 : (totalMilliseconds - 999) / 1000
        var days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondOfDay = Int(seconds - days * 86400)
        // Days to civil date (Howard Hinnant's algorithm).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthIndex + 2) / 5 + 1)
        let month = Int(monthIndex < 10 ? monthIndex + 3 : monthIndex - 9)
        let year = min(max(Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0)), 0), 9999)
        let milliseconds = milliseconds ? Int(totalMilliseconds - seconds * 1000) : nil
        // Written straight into the string's storage: one allocation, where appending to an array
        // and decoding it took two (`YYYY-MM-DDTHH:MM:SS.mmmZ` is longer than a small string).
        return String(unsafeUninitializedCapacity: milliseconds == nil ? 20 : 24) { out in
            var at = 0
            func digits(_ value: Int, _ count: Int) {
                var value = value
                for offset in stride(from: count - 1, through: 0, by: -1) {
                    out[at + offset] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
                at += count
            }
            func mark(_ character: Unicode.Scalar) {
                out[at] = UInt8(ascii: character)
                at += 1
            }
            digits(year, 4)
            mark("-")
            digits(month, 2)
            mark("-")
            digits(day, 2)
            mark("T")
            digits(secondOfDay / 3600, 2)
            mark(":")
            digits(secondOfDay % 3600 / 60, 2)
            mark(":")
            digits(secondOfDay % 60, 2)
            if let milliseconds {
                mark(".")
                digits(milliseconds, 3)
            }
            mark("Z")
            return at
        }
    }
}
