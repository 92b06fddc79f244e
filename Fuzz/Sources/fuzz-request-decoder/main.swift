import Foundation
import FuzzDriver
import Messages

// Every request value the worker polls goes through here first: whatever it is, decoding ends
// in valid, invalid (answered) or unanswerable (dead-lettered), never a crash.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let value = bytes(data, size)
    switch RequestDecoder().decode(value) {
    case .valid(let request):
        // Whatever was accepted has a usable id and a description without secrets.
        precondition(!request.id.isEmpty && !request.id.utf8.contains(0))
        _ = "\(request)"
    case .invalid(let id, _, let error):
        precondition(!id.isEmpty && !error.field.isEmpty)
    case .unanswerable:
        break
    }
    return 0
}

exit(runFuzzer(fuzzOne))
