#if canImport(Glibc)
    import Glibc
#endif

/// Nanoseconds on the system's monotonic clock: a plain integer, cheap to read, subtract and
/// count, for timing what runs for every message (`ContinuousClock`'s instants and durations are
/// 128-bit: turning one into seconds divides, several hundred instructions each time).
public enum MonotonicNanos {
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
