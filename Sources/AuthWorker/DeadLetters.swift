import Foundation
import Kafka
import Messages

/// What a dead letter carries: the original value with every credential the worker can find
/// replaced, cut to a size the broker takes.
///
/// A dead-lettered message is one the worker could not read as a request, but it may still be
/// mostly JSON with a password in it: a dead-letter topic is read by people, kept for long, and
/// must not become a store of credentials.
enum DeadLetters {
    /// Members whose values are credentials, wherever they appear: the contract's one list.
    static let credentialMembers: Set<String> = CredentialField.names
    static let redacted = "[redacted]"

    struct Copy: Equatable {
        var value: [UInt8]
        /// The original size, when the copy was cut.
        var truncatedFrom: Int?
        var redacted: Bool
    }

    /// The value to publish for `value`, at most `limit` bytes long.
    static func copy(of value: [UInt8], limit: Int) -> Copy {
        var copy = Copy(value: value, truncatedFrom: nil, redacted: false)
        if let structured = redactingJSON(value) {
            copy.value = structured.value
            copy.redacted = structured.changed
        } else {
            let scanned = redactingText(value)
            copy.value = scanned.value
            copy.redacted = scanned.changed
        }
        if copy.value.count > limit {
            copy.truncatedFrom = value.count
            copy.value = Array(copy.value.prefix(max(limit, 0)))
        }
        return copy
    }

    /// Values that parse as JSON (leniently: duplicate members and all): each credential member's
    /// value replaced, at any depth. Nil when the value is not JSON.
    private static func redactingJSON(_ value: [UInt8]) -> (value: [UInt8], changed: Bool)? {
        guard value.count <= 4 << 20, value.first.map({ $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: "[") }) == true,
            let parsed = try? JSONSerialization.jsonObject(with: Data(value), options: [.fragmentsAllowed])
        else { return nil }
        var changed = false
        func walk(_ node: Any) -> Any {
            if let object = node as? [String: Any] {
                var out: [String: Any] = [:]
                for (key, member) in object {
                    if credentialMembers.contains(key), !(member is NSNull) {
                        out[key] = redacted
                        changed = true
                    } else {
                        out[key] = walk(member)
                    }
                }
                return out
            }
            if let array = node as? [Any] { return array.map(walk) }
            return node
        }
        let cleaned = walk(parsed)
        guard changed else { return (value, false) }
        guard let data = try? JSONSerialization.data(withJSONObject: cleaned, options: [.sortedKeys]) else {
            return nil
        }
        return (Array(data), true)
    }

    /// Values that do not parse (cut short, broken): the string after each credential member's
    /// name and its `:` is replaced up to its closing quote, or to the end. Every string is read
    /// as a whole token, escapes and all, so a name spelt with escapes (`"pass\u0077ord"`) is
    /// recognised, and a credential's name inside another string is left alone.
    private static func redactingText(_ value: [UInt8]) -> (value: [UInt8], changed: Bool) {
        var out: [UInt8] = []
        out.reserveCapacity(value.count)
        var changed = false
        var index = 0
        let quote = UInt8(ascii: "\"")
        func skipSpace(_ position: Int) -> Int {
            var position = position
            while position < value.count, [0x20, 0x09, 0x0A, 0x0D].contains(value[position]) { position += 1 }
            return position
        }
        /// The index just past the string token that opens at `start` (or the end of the value).
        func endOfString(_ start: Int) -> Int {
            var end = start + 1
            while end < value.count, value[end] != quote {
                end += value[end] == UInt8(ascii: "\\") ? 2 : 1
            }
            return min(end + 1, value.count)
        }
        while index < value.count {
            guard value[index] == quote else {
                out.append(value[index])
                index += 1
                continue
            }
            let nameEnd = endOfString(index)
            let token = value[index..<nameEnd]
            out.append(contentsOf: token)
            index = nameEnd
            guard let name = unescapedString(token), credentialMembers.contains(name) else { continue }
            let colon = skipSpace(index)
            guard colon < value.count, value[colon] == UInt8(ascii: ":") else { continue }
            let valueStart = skipSpace(colon + 1)
            guard valueStart < value.count, value[valueStart] == quote else { continue }
            let valueEnd = endOfString(valueStart)
            out.append(contentsOf: value[index...valueStart])
            out.append(contentsOf: Array(redacted.utf8))
            if valueEnd - valueStart >= 2, value[valueEnd - 1] == quote { out.append(quote) }
            index = valueEnd
            changed = true
        }
        return (out, changed)
    }

    /// The text of a complete JSON string token (quotes included), escapes decoded; nil when it
    /// is cut short or not valid JSON.
    static func unescapedString(_ token: ArraySlice<UInt8>) -> String? {
        guard token.count >= 2, token.last == UInt8(ascii: "\""),
            let decoded = try? JSONSerialization.jsonObject(with: Data(token), options: [.fragmentsAllowed])
        else { return nil }
        return decoded as? String
    }
}
