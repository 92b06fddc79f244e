import JOSE
import JOSEFixtures

/// Keys are expensive to generate (RSA-4096 takes a while): made once per test run.
enum Signers {
    static let rsa2048 = TestSigner(.rsa(2048), kid: "rsa2048")
    static let rsa3072 = TestSigner(.rsa(3072), kid: "rsa3072")
    static let rsa4096 = TestSigner(.rsa(4096), kid: "rsa4096")
    static let p256 = TestSigner(.ec(.p256), kid: "p256")
    static let p384 = TestSigner(.ec(.p384), kid: "p384")
    static let p521 = TestSigner(.ec(.p521), kid: "p521")
    static let ed25519 = TestSigner(.ed25519, kid: "ed25519")
    static let all = [rsa2048, rsa3072, rsa4096, p256, p384, p521, ed25519]
    static let keySet: JWKSet = (try? JWKSet(json: TestSigner.keySet(all))) ?? JWKSet(keys: [])
}
