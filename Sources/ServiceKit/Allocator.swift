import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The C allocator's settings for a long-running service.
public enum Allocator {
    /// Keeps freed memory in the process, up to `trimThreshold` bytes at the top of each heap,
    /// instead of handing it back to the kernel after a free; and serves blocks below
    /// `mmapThreshold` from the heaps rather than from mappings of their own.
    ///
    /// librdkafka allocates and frees a zeroed compression context of about 100 KB for every
    /// message set it compresses, and under light load every answer is a message set of its own.
    /// With glibc's defaults the freed context was returned to the kernel (`madvise`) and the next
    /// set faulted its pages in again: 5.9 page faults a login at 300 guest logins/s, 0.43 with
    /// these settings; the worker's samples in page faults and `madvise` 3.3 % → 0.2 %. The cost
    /// is memory: up to `trimThreshold` bytes a heap stay resident after a burst.
    ///
    /// Call it once at start, before the threads that allocate begin. The settings are the
    /// process's, and override what `GLIBC_TUNABLES` set for these two.
    /// - Returns: whether the allocator took both settings (false where it is not glibc's).
    @discardableResult
    public static func keepFreedMemory(trimThreshold: Int = 16 << 20, mmapThreshold: Int = 4 << 20) -> Bool {
        // `mallopt` is glibc's, declared in <malloc.h>, which the Glibc module does not include:
        // looked up by name, with the parameters' values from that header.
        #if canImport(Glibc)
            typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
            let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
            let trim: Int32 = -1  // M_TRIM_THRESHOLD
            let mmap: Int32 = -3  // M_MMAP_THRESHOLD
            return mallopt(trim, Int32(clamping: trimThreshold)) == 1
                && mallopt(mmap, Int32(clamping: mmapThreshold)) == 1
        #else
            return false
        #endif
    }
}
