#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes files that hold secrets (private keys): readable by the owner only from the moment they
/// exist.
///
/// `FileManager.createFile(atPath:contents:attributes:)` writes a temporary file with the process
/// umask, renames it into place and only then applies the permissions: another local user can open
/// it in between. Here the file is created with `O_CREAT | O_EXCL` and mode 0600 in one call, never
/// follows a symbolic link, and never replaces an existing file.
public enum SecretFile {
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public let description: String
    }

    /// Creates `path` with mode 0600 and writes `contents`; removes it again if the write fails.
    /// - Throws: `Failure` when the file exists, the folder is missing, or the write fails.
    public static func create(atPath path: String, contents: [UInt8]) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST ? "exists; refusing to overwrite it" : String(cString: strerror(errno))
            throw Failure(description: "\(path): \(reason)")
        }
        var written = 0
        var failure: String?
        contents.withUnsafeBytes { buffer in
            while written < buffer.count, let base = buffer.baseAddress {
                let result = write(descriptor, base + written, buffer.count - written)
                if result < 0 {
                    if errno == EINTR { continue }
                    failure = String(cString: strerror(errno))
                    return
                }
                written += result
            }
        }
        if failure == nil, fsync(descriptor) != 0 { failure = String(cString: strerror(errno)) }
        if close(descriptor) != 0, failure == nil { failure = String(cString: strerror(errno)) }
        if let failure {
            unlink(path)
            throw Failure(description: "\(path): \(failure)")
        }
    }
}
