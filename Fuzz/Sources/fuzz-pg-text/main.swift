import Foundation
import FuzzDriver
import PGStore

// Values PostgreSQL sends back as text: decoded or refused. What decodes can be sent back
// (bytea and text arrays round-trip; timestamps are read in the server's output style and sent
// in ISO 8601, so they are only encoded).
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: bytes(data, size), as: UTF8.self)
    if let date = Date(pgText: text) {
        _ = date.pgText
    }
    if let bytes = PGBytes(pgText: text) {
        precondition(PGBytes(pgText: bytes.pgText) == bytes, "bytea did not round-trip")
    }
    if let list = [String](pgText: text) {
        precondition([String](pgText: list.pgText) == list, "a text array did not round-trip")
    }
    _ = UUID(pgText: text)
    _ = Bool(pgText: text)
    _ = Int64(pgText: text)
    return 0
}

exit(runFuzzer(fuzzOne))
