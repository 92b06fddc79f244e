import Foundation
import FuzzDriver
import JOSE

// A provider's key set, fetched over the network: parsed into keys (with their strength
// checked), or refused.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let json = Data(bytes(data, size))
    if let set = try? JWKSet(json: json) {
        _ = set.keys.count
    }
    _ = try? JWK(json: json)
    return 0
}

exit(runFuzzer(fuzzOne))
