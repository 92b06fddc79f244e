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
        sql = stringInterpolation.sql
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

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var parameters: [PGParameter?] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        /// A bound parameter.
        public mutating func appendInterpolation(_ value: some PGEncodable) {
            parameters.append(PGParameter(text: value.pgText))
            sql += "$\(parameters.count)"
        }

        /// A bound parameter that may be NULL.
        public mutating func appendInterpolation(_ value: (some PGEncodable)?) {
            parameters.append(value.map { PGParameter(text: $0.pgText) })
            sql += "$\(parameters.count)"
        }

        /// An array parameter, in binary, cast to its type: `$n::uuid[]`.
        public mutating func appendInterpolation(_ array: PGArray) {
            parameters.append(array.parameter)
            sql += "$\(parameters.count)::\(array.typeName)"
        }

        /// Literal SQL text, not a parameter: only for fragments the code itself chooses.
        public mutating func appendInterpolation(unsafeRaw fragment: String) {
            sql += fragment
        }
    }
}
