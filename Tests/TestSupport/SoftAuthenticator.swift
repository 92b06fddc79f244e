import Foundation
import Messages
import Testing

/// The software authenticator and independent verifier of `Tests/Tools/soft-authenticator.py`
/// (Python `cryptography`, `cbor2` and py_webauthn, installed by `scripts/dev-env install`): makes
/// real WebAuthn responses from the worker's options and says whether py_webauthn accepts them.
enum SoftAuthenticator {
    static let isAvailable = IndependentJOSE.canImport("cbor2, webauthn, cryptography")

    static let script = ProjectPaths.root.appendingPathComponent("Tests/Tools/soft-authenticator.py").path

    /// One command (see the script) as JSON; its answer as JSON.
    static func run(_ command: Data) async throws -> Data {
        let output = try await IndependentJOSE.run(
            "import runpy, sys; sys.argv = ['soft-authenticator']; runpy.run_path(\(pythonString(script)), run_name='__main__')",
            input: String(decoding: command, as: UTF8.self))
        return Data(output.utf8)
    }

    private static func pythonString(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    /// The worker's options as the JSON object the script reads.
    static func json(_ options: PasskeyOptionsPayload) throws -> [String: Any] {
        try object(MessageCoding.encode(options))
    }

    static func object(_ data: some Sequence<UInt8>) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(data)) as? [String: Any] else {
            throw IndependentJOSE.Failure(description: "not a JSON object")
        }
        return object
    }
}

extension Trait where Self == ConditionTrait {
    static var requiresSoftAuthenticator: Self {
        .enabled(
            if: IntegrationEnvironment.isRequired || SoftAuthenticator.isAvailable,
            "python3 with cryptography, cbor2 and webauthn (py_webauthn) is not installed")
    }
}
