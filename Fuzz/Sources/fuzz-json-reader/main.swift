import Foundation
import FuzzDriver
import StrictJSON

// The strict JSON reader under every token header, claim set, key set and request: it accepts
// or throws, within its depth limit. Every string it reads, written back by the writer that
// writes results and events, reads back the same.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    _ = JSONReader.topLevelString(input, member: "id")
    guard let object = try? JSONReader.object(input) else { return 0 }
    for (key, value) in object {
        guard case .string(let text) = value else { continue }
        var writer = JSONWriter()
        writer.object { writer in writer.member("k", text) }
        let again = try? JSONReader.object(writer.bytes)
        precondition(again?["k"] == .string(text), "the string of \(key.count) characters did not read back")
    }
    return 0
}

exit(runFuzzer(fuzzOne))
