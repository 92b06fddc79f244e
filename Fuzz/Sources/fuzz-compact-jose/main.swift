import AuthCrypto
import Foundation
import FuzzDriver
import JOSE

// Compact JWS and JWE as they arrive in requests (identity tokens, sealed credentials, access
// tokens): split and decoded, or refused with a JOSEError, never anything else.
let privateKey = [UInt8](repeating: 0x42, count: 32)

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: bytes(data, size), as: UTF8.self)
    do {
        let jws = try CompactJWS(text)
        _ = jws.header.alg
    } catch is JOSEError {
    } catch {
        preconditionFailure("CompactJWS threw something other than a JOSEError")
    }
    do {
        _ = try JWE.openECDHES(text, privateKey: privateKey)
    } catch is JOSEError {
    } catch {
        preconditionFailure("JWE.openECDHES threw something other than a JOSEError")
    }
    _ = JWE.keyID(of: text)
    return 0
}

exit(runFuzzer(fuzzOne))
