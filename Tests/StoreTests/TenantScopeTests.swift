import Foundation
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// Every statement a request's transaction sends is its tenant's: read from the store's own
/// source, each SQL text that names a table of tenant rows (`Migrations.tenantTables`) names
/// `tenant` (a condition, a column written, or the user's tenant a session's rows are checked
/// against, `Decode.owned`), with the fragments it interpolates (`\(unsafeRaw: Self.x)`) in place.
@Suite struct TenantScopeTests {
    /// The files whose statements run in a request's transaction or before it, for a request.
    static let requestFiles = [
        "PostgresUnitOfWork+Users.swift", "PostgresUnitOfWork+Sessions.swift", "PostgresUnitOfWork+Codes.swift",
        "PostgresUnitOfWork+Passkeys.swift", "PostgresUnitOfWork+Records.swift", "PrefetchQueries.swift",
        "Writes.swift", "TenantAttempts.swift", "PostgresStore+Lookups.swift", "PostgresStore+Apple.swift",
    ]

    /// The SQL texts of a Swift file: its string literals (one-line and multi-line) that hold a statement.
    static func literals(_ source: String) -> [String] {
        allLiterals(source).filter { text in
            ["SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM"].contains { text.contains($0) }
        }
    }

    /// Every string literal of a Swift file, in order.
    static func allLiterals(_ source: String) -> [String] {
        var found: [String] = []
        var rest = Substring(source)
        while let start = rest.firstRange(of: "\"") {
            if rest[start.lowerBound...].hasPrefix("\"\"\"") {
                let body = rest[rest.index(start.lowerBound, offsetBy: 3)...]
                guard let end = body.firstRange(of: "\"\"\"") else { break }
                found.append(String(body[..<end.lowerBound]))
                rest = body[end.upperBound...]
            } else {
                let body = rest[start.upperBound...]
                guard let end = body.firstIndex(where: { $0 == "\"" || $0 == "\n" }) else { break }
                found.append(String(body[..<end]))
                rest = body[body.index(after: end)...]
            }
        }
        return found
    }

    /// `static let name = "…"` (or `"""…"""`) fragments of a file, by name.
    static func fragments(_ source: String) -> [String: String] {
        var found: [String: String] = [:]
        for declaration in source.components(separatedBy: "static let ").dropFirst() {
            guard let name = declaration.split(separator: " ").first,
                let equals = declaration.firstIndex(of: "="),
                let open = declaration[equals...].firstIndex(where: { !$0.isWhitespace && $0 != "=" }),
                declaration[open] == "\""
            else { continue }
            if let first = Self.allLiterals(String(declaration[open...])).first { found[String(name)] = first }
        }
        return found
    }

    /// Statements that count or sweep every tenant's rows at once (a metric, the purge): none of
    /// a request's.
    static let deploymentWide = ["FROM apple_jobs WHERE finished_at IS NULL"]

    @Test func everyStatementOfARequestNamesItsTenant() throws {
        let folder = ProjectPaths.root.appendingPathComponent("Sources/AuthStore")
        let sources = try Self.requestFiles.map {
            ($0, try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8))
        }
        var fragments: [String: String] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".swift") {
            let source = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            fragments.merge(Self.fragments(source)) { first, _ in first }
        }
        let tables = Migrations.tenantTables
        var checked = 0
        var unscoped: [String] = []
        for (file, source) in sources {
            for literal in Self.literals(source) {
                var text = literal
                for (name, fragment) in fragments {
                    for prefix in ["Self.", "PrefetchQueries.", "PostgresUnitOfWork."] {
                        text = text.replacingOccurrences(of: "unsafeRaw: \(prefix)\(name))", with: fragment + ")")
                    }
                }
                let words = text.split(whereSeparator: { !$0.isLetter && $0 != "_" }).map(String.init)
                let named = words.indices.contains { index in
                    index > 0 && tables.contains(words[index])
                        && ["FROM", "JOIN", "INTO", "UPDATE"].contains(words[index - 1])
                }
                // A fragment on its own is checked where it is used.
                guard named, !fragments.values.contains(literal),
                    !Self.deploymentWide.contains(where: { literal.contains($0) })
                else { continue }
                checked += 1
                if !text.contains("tenant") { unscoped.append("\(file): \(literal)") }
            }
        }
        #expect(checked >= 50, "the statements were found (\(checked))")
        #expect(unscoped.isEmpty, "\(unscoped.joined(separator: "\n\n"))")
    }

    @Test func aKeyOfAnotherTenantIsKeptApart() {
        #expect(TenantScope.scoped("guest:client", in: "default") == "guest:client")
        #expect(TenantScope.scoped("guest:client", in: "acme") == "@acme/guest:client")
        var prefetch = Prefetch()
        prefetch.users = [UUID()]
        var acme = Prefetch(tenant: "acme")
        acme.handles = ["h"]
        var beta = Prefetch(tenant: "beta")
        beta.handles = ["b"]
        prefetch.merge(beta)
        prefetch.merge(acme)
        var more = Prefetch()
        more.handles = ["d"]
        prefetch.merge(more)
        #expect(prefetch.parts.map(\.tenant) == ["default", "acme", "beta"])
        #expect(prefetch.parts.map(\.handles) == [["d"], ["h"], ["b"]])
        let reads = PrefetchQueries(prefetch)
        #expect(reads.queries.count == 4, "the default tenant's users and handles, then acme's and beta's handles")
    }
}
