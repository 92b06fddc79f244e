import COpenSSL

/// Algorithm implementations fetched from OpenSSL's default provider once per process.
///
/// `EVP_sha256()`, `EVP_aes_256_gcm()` and friends make every `…Init` call fetch the implementation
/// again; an explicitly fetched `EVP_MD` or `EVP_CIPHER` skips that. `@unchecked Sendable`: fetched
/// algorithms are immutable and reference-counted by OpenSSL, safe to share between threads.
public final class FetchedAlgorithms: @unchecked Sendable {
    public static let shared = FetchedAlgorithms()

    public let sha256: OpaquePointer?
    public let sha384: OpaquePointer?
    public let sha512: OpaquePointer?
    public let aes256GCM: OpaquePointer?

    private init() {
        // Fall back to the legacy accessors if a fetch fails (never with the default provider).
        sha256 = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()
        sha384 = EVP_MD_fetch(nil, "SHA384", nil) ?? EVP_sha384()
        sha512 = EVP_MD_fetch(nil, "SHA512", nil) ?? EVP_sha512()
        aes256GCM = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) ?? EVP_aes_256_gcm()
    }
}
