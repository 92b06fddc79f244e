/// SQL with bound parameters, built by string interpolation.
///
/// Every interpolated value becomes `$n` and a parameter sent separately from the text, so values
/// can never change the statement:
///
///     let query: PGQuery = "SELECT id FROM users WHERE email = \(email) AND is_guest = \(false)"
///
/// Literal SQL fragments that are not values (identifiers chosen by code) go through
/// `\(unsafeRaw: …)`, whose name says what it is.
public struct PGQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The statement, with `$1…$n` placeholders.
    public private(set) var sql: String
    /// The parameter values; nil is SQL NULL.
    public private(set) var parameters: [PGParameter?]

    public init(stringLiteral value: String) {
        sql = value
        parameters = []
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = String(decoding: stringInterpolation.sql, as: UTF8.self)
        parameters = stringInterpolation.parameters
    }

    /// A statement with no parameters, from text the code controls.
    public init(unsafeSQL: String) {
        sql = unsafeSQL
        parameters = []
    }

    /// A statement from text the code controls, with parameters already bound (`EXPLAIN` + a
    /// query's own text, with the query's parameters).
    public init(unsafeSQL: String, parameters: [PGParameter?]) {
        sql = unsafeSQL
        self.parameters = parameters
    }

    /// The statement only: parameter values are never printed.
    public var description: String { sql }

    /// Writes the text as bytes and makes it a `String` once: appending to a `String` checks
    /// where each piece joins the last (grapheme boundaries, its storage's state), about 300
    /// instructions an append, and a batch's statements take some two hundred appends.
    public struct StringInterpolation: StringInterpolationProtocol {
        var sql: [UInt8] = []
        var parameters: [PGParameter?] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            // Room for each placeholder and an array's cast (`$12::timestamptz[]`).
            sql.reserveCapacity(literalCapacity + interpolationCount * 18)
            parameters.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql.append(contentsOf: literal.utf8)
        }

        /// A bound parameter.
        public mutating func appendInterpolation(_ value: some PGEncodable) {
            parameters.append(PGParameter(text: value.pgText))
            appendPlaceholder()
        }

        /// A bound parameter that may be NULL.
        public mutating func appendInterpolation(_ value: (some PGEncodable)?) {
            parameters.append(value.map { PGParameter(text: $0.pgText) })
            appendPlaceholder()
        }

        /// An array parameter, in binary, cast to its type: `$n::uuid[]`.
        public mutating func appendInterpolation(_ array: PGArray) {
            parameters.append(array.parameter)
            appendPlaceholder()
            sql.append(UInt8(ascii: ":"))
            sql.append(UInt8(ascii: ":"))
            sql.append(contentsOf: array.typeName.utf8)
        }

        /// `$n` for the parameter just appended, its digits written in place.
        private mutating func appendPlaceholder() {
            sql.append(UInt8(ascii: "$"))
            var number = parameters.count
            var digits = 1
            while number >= 10 {
                number /= 10
                digits *= 10
            }
            number = parameters.count
            while digits > 0 {
                sql.append(UInt8(ascii: "0") + UInt8(number / digits))
                number %= digits
                digits /= 10
            }
        }

        /// Literal SQL text, not a parameter: only for fragments the code itself chooses.
        public mutating func appendInterpolation(unsafeRaw fragment: String) {
            sql.append(contentsOf: fragment.utf8)
        }
    }
}
