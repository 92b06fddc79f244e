import Foundation
import FuzzDriver
import WebAuthn

// A passkey ceremony's binary parts, as a client sends them: the input is read as CBOR, as
// authenticator data, as a COSE key, and as the attestation object of a registration (whose
// client data is fixed), and each either parses or is refused.
let relyingParty = RelyingParty(
    id: "example.com", name: "Example", origins: ["https://example.com"], userVerification: .preferred)
let clientData = Array(
    #"{"type":"webauthn.create","challenge":"AAECAwQFBgcICQoLDA0ODw","origin":"https://example.com"}"#.utf8)

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    _ = try? CBOR.decode(input)
    _ = try? AuthenticatorData(input, field: "fuzz")
    _ = try? COSEKey(bytes: input)
    let response = RegistrationResponse(
        id: "", rawID: [], clientDataJSON: clientData, attestationObject: input, transports: [])
    _ = try? WebAuthnCeremony.verifyRegistration(response, rp: relyingParty, algorithms: [.es256, .edDSA, .rs256])
    return 0
}

exit(runFuzzer(fuzzOne))
