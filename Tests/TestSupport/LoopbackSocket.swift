import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking TCP connection to 127.0.0.1:`port`, for the tests of the project's HTTP servers.
/// - Returns: the socket's descriptor (the caller closes it).
func connectLoopback(_ port: UInt16) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard fd >= 0, connected == 0 else {
        if fd >= 0 { close(fd) }
        throw LoopbackConnectionRefused(port: port)
    }
    return fd
}

struct LoopbackConnectionRefused: Error, CustomStringConvertible {
    var port: UInt16
    var description: String { "cannot connect to 127.0.0.1:\(port)" }
}
