import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A certificate authority of one test's own, and the certificates it issues (P-256 keys, two
/// days), made with the `openssl` tool: what a test server's TLS is verified against, and what a
/// client presents for mutual TLS.
struct TestCertificateAuthority: Sendable {
    /// Where the CA's files and, by default, its certificates are kept.
    let directory: String
    var certificate: String { directory + "/ca.crt" }
    private var key: String { directory + "/ca.key" }

    init(directory: String, name: String = "test CA") throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key])
        try Self.openssl([
            "req", "-x509", "-new", "-key", key, "-subj", "/CN=\(name)", "-days", "2", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out",
            certificate,
        ])
    }

    /// Issues `name.crt` and `name.key` (mode 0600) in `directory` (the CA's by default), for
    /// `subject` with `extensions` (an `openssl x509 -extfile` line each, such as
    /// `subjectAltName=DNS:localhost` or `extendedKeyUsage=clientAuth`).
    @discardableResult
    func issue(_ name: String, subject: String, extensions: [String], in directory: String? = nil) throws -> (
        certificate: String, key: String
    ) {
        let folder = directory ?? self.directory
        let certificate = "\(folder)/\(name).crt", key = "\(folder)/\(name).key"
        try Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key])
        chmod(key, 0o600)
        try Self.openssl(["req", "-new", "-key", key, "-subj", subject, "-out", "\(folder)/\(name).csr"])
        let config = "\(folder)/\(name).ext"
        try Data((extensions.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: config))
        try Self.openssl([
            "x509", "-req", "-in", "\(folder)/\(name).csr", "-CA", self.certificate, "-CAkey", self.key,
            "-CAcreateserial", "-days", "2", "-extfile", config, "-out", certificate,
        ])
        return (certificate, key)
    }

    private static func openssl(_ arguments: [String]) throws {
        try IsolatedCluster.run("/usr/bin/openssl", arguments)
    }
}
