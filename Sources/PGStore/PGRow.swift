/// The rows of one statement's result, copied out of libpq.
public struct PGRows: Sendable, Sequence {
    /// Column names, in order.
    public let columns: [String]
    /// Each row's values in text format; nil is NULL.
    public let values: [[String?]]
    /// Rows affected by INSERT/UPDATE/DELETE (`PQcmdTuples`), or 0.
    public let affectedRows: Int

    public init(columns: [String], values: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
    }

    public var count: Int { values.count }
    public var isEmpty: Bool { values.isEmpty }
    public var first: PGRow? { values.first.map { PGRow(columns: columns, values: $0) } }

    public func makeIterator() -> some IteratorProtocol<PGRow> {
        values.lazy.map { PGRow(columns: columns, values: $0) }.makeIterator()
    }
}

/// One row, with typed access by column name.
public struct PGRow: Sendable {
    public let columns: [String]
    public let values: [String?]

    /// The value of `column` decoded as `T`.
    /// - Throws: `PGError` `.decoding` when the column is missing, NULL, or not a `T`.
    public func decode<T: PGDecodable>(_ column: String, as type: T.Type = T.self) throws -> T {
        guard let value = try decode(column, as: T?.self) else {
            throw PGError(.decoding, detail: "column \(column) is NULL")
        }
        return value
    }

    /// The value of `column` decoded as `T`, or nil for NULL.
    public func decode<T: PGDecodable>(_ column: String, as type: T?.Type = T?.self) throws -> T? {
        guard let index = columns.firstIndex(of: column) else {
            throw PGError(.decoding, detail: "no column \(column)")
        }
        guard let text = values[index] else { return nil }
        guard let value = T(pgText: text) else {
            throw PGError(.decoding, detail: "column \(column) is not a \(T.self)")
        }
        return value
    }
}
