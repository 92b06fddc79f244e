import Foundation

/// What new passwords must be, per NIST SP 800-63B §5.1.1: long enough, not absurdly long, any
/// Unicode, no composition rules, and not one of the most common passwords.
public struct PasswordPolicy: Sendable {
    /// Default: 8 characters (after NFKC normalisation, counted as user-perceived characters).
    public var minimumCharacters = 8
    /// Default: 1024 bytes of UTF-8 (well above NIST's "at least 64 characters").
    public var maximumBytes = 1024

    public init() {}

    /// A reason the password is refused, for the `weak_password` result.
    public struct Weakness: Error, Equatable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// Throws `Weakness` when the password may not be used.
    public func check(_ password: String, email: String? = nil) throws {
        let normalized = password.precomposedStringWithCompatibilityMapping
        guard normalized.count >= minimumCharacters else {
            throw Weakness(reason: "must be at least \(minimumCharacters) characters")
        }
        guard normalized.utf8.count <= maximumBytes else {
            throw Weakness(reason: "must be at most \(maximumBytes) bytes")
        }
        guard !normalized.unicodeScalars.contains(where: { $0.value == 0 }) else {
            throw Weakness(reason: "must not contain NUL characters")
        }
        let lowered = normalized.lowercased()
        guard !Self.common.contains(lowered) else {
            throw Weakness(reason: "is one of the most commonly used passwords")
        }
        if let email {
            let address = email.lowercased()
            let local = String(address.split(separator: "@").first ?? "")
            if lowered == address || Self.isDecorated(lowered, word: local) {
                throw Weakness(reason: "must not be the e-mail address")
            }
        }
        for word in contextWords where Self.isDecorated(lowered, word: word.lowercased()) {
            throw Weakness(reason: "must not be the name of this service")
        }
        if Set(lowered).count == 1 {
            throw Weakness(reason: "must not repeat one character")
        }
    }

    /// Words that must not be a password, nor its core with only digits or symbols around it:
    /// the service's and the company's names, for example (NIST's "context-specific words").
    /// Compared lower-cased. The e-mail address and its local part always count.
    public var contextWords: [String] = []

    /// The most common breached passwords (lower-cased, 8 characters or more): the generated
    /// list, read once, on first use, into a set.
    static let common: Set<String> = {
        var set = Set<String>(minimumCapacity: 130_000)
        for line in commonPasswordLines.split(separator: "\n") { set.insert(String(line)) }
        return set
    }()

    /// How many passwords the common list holds.

    /// `password` is `word`, or `word` with only non-letters before or after it (`acme2024!`).
    static func isDecorated(_ password: String, word: String) -> Bool {
        guard word.count >= 3 else { return password == word }
        guard let range = password.range(of: word) else { return false }
        return !password[..<range.lowerBound].contains(where: \.isLetter)
            && !password[range.upperBound...].contains(where: \.isLetter)
    }
}

/// E-mail addresses as accounts use them.
public enum EmailAddress {
    /// Trimmed and lower-cased (local part and domain), or nil when it is not a plausible address:
    /// one `@`, a local part of 1 to 64 bytes, a domain with a dot and no empty label, at most
    /// 254 bytes, no whitespace or control characters.
    public static func normalize(_ text: String) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        guard trimmed.utf8.count <= 254,
            !trimmed.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 } == true })
        else { return nil }
        let parts = trimmed.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64 else { return nil }
        let labels = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ !$0.isEmpty && !$0.hasPrefix("-") && !$0.hasSuffix("-") }) else {
            return nil
        }
        return trimmed
    }
}
