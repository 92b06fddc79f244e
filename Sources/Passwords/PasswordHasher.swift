import AuthCrypto
import CArgon2
import CCrypt
import Foundation

/// Argon2id parameters, as a PHC string records them.
public struct Argon2Parameters: Sendable, Equatable {
    /// Memory in KiB. Default: 19456 (19 MiB, OWASP's minimum for Argon2id).
    public var memoryKiB: UInt32 = 19456
    /// Passes. Default: 2.
    public var iterations: UInt32 = 2
    /// Lanes. Default: 1.
    public var parallelism: UInt32 = 1
    public var saltLength = 16
    public var hashLength = 32

    public init() {}

    public init(memoryKiB: UInt32, iterations: UInt32, parallelism: UInt32) {
        self.memoryKiB = memoryKiB
        self.iterations = iterations
        self.parallelism = parallelism
    }
}

/// Hashes and verifies passwords: Argon2id (PHC strings) for new hashes; legacy bcrypt
/// (`$2a$`, `$2b$`, `$2y$`, Laravel's default) and Argon2 PHC strings of other parameters verified,
/// and flagged for rehashing on a successful login.
///
/// Every call is CPU-bound for tens of milliseconds: run them on an `ExecutorPool`, never on the
/// cooperative thread pool.
public struct PasswordHasher: Sendable {
    public let parameters: Argon2Parameters
    /// Stored hashes asking for more than this much memory are refused (a planted hash must not
    /// make a login allocate gigabytes). Default: 1 GiB.
    public var maximumMemoryKiB: UInt32 = 1 << 20
    /// Stored hashes asking for more passes are refused. Default: 64.
    public var maximumIterations: UInt32 = 64
    /// bcrypt costs accepted when verifying. Default: 4...16.
    public var bcryptCosts: ClosedRange<Int> = 4...16

    public init(parameters: Argon2Parameters = Argon2Parameters()) {
        self.parameters = parameters
    }

    /// The outcome of a verification.
    public struct Verification: Sendable, Equatable {
        public var matches: Bool
        /// True when the password matched a hash that is not Argon2id with the current parameters.
        public var needsRehash: Bool

        public init(matches: Bool, needsRehash: Bool) {
            self.matches = matches
            self.needsRehash = needsRehash
        }
    }

    /// Errors making a new hash (never for a wrong password).
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// A new Argon2id PHC string for `password`, with a random salt.
    ///
    /// The password is normalised to NFKC first (NIST SP 800-63B §5.1.1.2), so the same password
    /// typed on different keyboards hashes alike.
    public func hash(_ password: String) throws -> String {
        let bytes = Array(Self.normalized(password).utf8)
        let salt = try SecureRandom.bytes(parameters.saltLength)
        let length = argon2_encodedlen(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, UInt32(salt.count),
            UInt32(parameters.hashLength), Argon2_id)
        var encoded = [CChar](repeating: 0, count: length)
        let status = argon2id_hash_encoded(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, bytes, bytes.count, salt, salt.count,
            parameters.hashLength, &encoded, encoded.count)
        guard status == ARGON2_OK.rawValue else {
            throw Failure(description: "argon2 failed: \(String(cString: argon2_error_message(status)))")
        }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// An Argon2id hash of this hasher's parameters that no password matches: a random salt and a
    /// random tag, in the form libargon2 writes. Checking a password against it costs one hash of
    /// these parameters, as checking against a stored hash does; making it costs none (a hash of a
    /// random password would cost one, and match nothing more surely).
    public func unmatchableHash() throws -> String {
        Self.encoded(
            parameters, salt: try SecureRandom.bytes(parameters.saltLength),
            tag: try SecureRandom.bytes(parameters.hashLength))
    }

    /// The PHC string libargon2's `argon2id_hash_encoded` writes for this salt and tag: standard
    /// Base64 without padding.
    static func encoded(_ parameters: Argon2Parameters, salt: [UInt8], tag: [UInt8]) -> String {
        func base64(_ bytes: [UInt8]) -> String {
            String(Data(bytes).base64EncodedString().prefix { $0 != "=" })
        }
        return "$argon2id$v=19$m=\(parameters.memoryKiB),t=\(parameters.iterations),p=\(parameters.parallelism)"
            + "$\(base64(salt))$\(base64(tag))"
    }

    /// Checks `password` against a stored hash of any supported kind. Unknown or malformed hashes
    /// never match (and never crash).
    public func verify(_ password: String, against stored: String) -> Verification {
        if stored.hasPrefix("$argon2") {
            return verifyArgon2(password, stored)
        }
        if stored.hasPrefix("$2a$") || stored.hasPrefix("$2b$") || stored.hasPrefix("$2y$") {
            let matches = verifyBcrypt(password, stored)
            // bcrypt reads 72 bytes: a longer password matched only its first 72. Rehashing it
            // would make whatever tail this request typed the password, locking the real one out;
            // such a hash stays bcrypt (and as strong as it was).
            return Verification(matches: matches, needsRehash: matches && password.utf8.count <= 72)
        }
        return Verification(matches: false, needsRehash: false)
    }

    /// The parameters of an Argon2id hash that this verifier would check (memory and passes within
    /// its bounds); nil for anything else.
    public func argon2idParameters(of stored: String) -> Argon2Parameters? {
        guard let phc = PHCString(stored), phc.variant == "argon2id", phc.version == 19,
            phc.memoryKiB <= maximumMemoryKiB, phc.iterations <= maximumIterations, (1...64).contains(phc.parallelism)
        else { return nil }
        return Argon2Parameters(memoryKiB: phc.memoryKiB, iterations: phc.iterations, parallelism: phc.parallelism)
    }

    /// NFKC, as hashes made here use.
    static func normalized(_ password: String) -> String {
        password.precomposedStringWithCompatibilityMapping
    }

    private func verifyArgon2(_ password: String, _ stored: String) -> Verification {
        guard let phc = PHCString(stored) else { return Verification(matches: false, needsRehash: false) }
        guard phc.memoryKiB <= maximumMemoryKiB, phc.iterations <= maximumIterations, phc.parallelism <= 64 else {
            return Verification(matches: false, needsRehash: false)
        }
        let type: argon2_type =
            switch phc.variant {
            case "argon2id": Argon2_id
            case "argon2i": Argon2_i
            default: Argon2_d
            }
        // Hashes made here are over NFKC; hashes imported from elsewhere may be over the raw bytes.
        var matches = argon2Verify(stored, Array(Self.normalized(password).utf8), type)
        if !matches, Self.normalized(password) != password {
            matches = argon2Verify(stored, Array(password.utf8), type)
        }
        let current =
            phc.variant == "argon2id" && phc.version == 19 && phc.memoryKiB == parameters.memoryKiB
            && phc.iterations == parameters.iterations && phc.parallelism == parameters.parallelism
        return Verification(matches: matches, needsRehash: matches && !current)
    }

    private func argon2Verify(_ stored: String, _ password: [UInt8], _ type: argon2_type) -> Bool {
        argon2_verify(stored, password, password.count, type) == ARGON2_OK.rawValue
    }

    /// bcrypt through libxcrypt's `crypt_r`; the result is compared in constant time.
    private func verifyBcrypt(_ password: String, _ stored: String) -> Bool {
        let bytes = Array(stored.utf8)
        // $2b$NN$ + 53 characters of salt and hash.
        guard bytes.count == 60, let cost = Int(String(decoding: bytes[4..<6], as: UTF8.self)),
            bcryptCosts.contains(cost), !password.utf8.contains(0)
        else { return false }
        var output = [CChar](repeating: 0, count: Int(CRYPT_OUTPUT_SIZE))
        guard ccrypt_shim_crypt(password, stored, &output, output.count) == 0 else { return false }
        let computed = output.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return ConstantTime.equals(computed, bytes)
    }
}

/// The fields of an Argon2 PHC string: `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`.
struct PHCString {
    var variant: String
    /// 16 when the string has no `v=` (the original Argon2), else the number given.
    var version: Int
    var memoryKiB: UInt32
    var iterations: UInt32
    var parallelism: UInt32

    init?(_ text: String) {
        let parts = text.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 5 || parts.count == 6, parts[0].isEmpty else { return nil }
        variant = String(parts[1])
        guard ["argon2id", "argon2i", "argon2d"].contains(variant) else { return nil }
        var index = 2
        if parts[2].hasPrefix("v=") {
            guard let version = Int(parts[2].dropFirst(2)) else { return nil }
            self.version = version
            index = 3
        } else {
            version = 16
        }
        guard parts.count == index + 3 else { return nil }
        var memory: UInt32?
        var iterations: UInt32?
        var parallelism: UInt32?
        for field in parts[index].split(separator: ",") {
            let pair = field.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, let value = UInt32(pair[1]) else { return nil }
            switch pair[0] {
            case "m": memory = value
            case "t": iterations = value
            case "p": parallelism = value
            default: return nil
            }
        }
        guard let memory, let iterations, let parallelism, !parts[index + 1].isEmpty, !parts[index + 2].isEmpty else {
            return nil
        }
        memoryKiB = memory
        self.iterations = iterations
        self.parallelism = parallelism
    }
}
