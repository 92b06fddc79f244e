import Foundation
import Synchronization
import Testing

@testable import ServiceKit

@Suite struct AllocatorTests {
    /// The minor page faults of the calling thread so far, from `/proc/thread-self/stat`.
    static func minorFaults() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return nil }
        // After the command's closing parenthesis: state, ppid, pgrp, session, tty, tpgid, flags, minflt.
        let fields = text[text.index(after: end)...].split(separator: " ")
        return fields.count > 7 ? Int(fields[7]) : nil
    }

    /// With the worker's settings, memory freed and allocated again is not faulted in again: 8 MiB
    /// in 64 KiB blocks, all freed, leaves a free top of the heap that glibc's defaults hand back
    /// to the kernel (their trim threshold starts at 128 KiB), so the second round would fault its
    /// 2,048 pages in once more. Counted on a thread of its own (faults are counted per thread).
    @Test func memoryFreedAndAllocatedAgainIsNotFaultedInAgain() throws {
        #expect(Allocator.keepFreedMemory())
        let outcome = Mutex<Int?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            let size = 64 << 10
            func round() -> Bool {
                var blocks: [UnsafeMutableRawPointer] = []
                defer { blocks.forEach { free($0) } }
                for _ in 0..<128 {
                    guard let block = malloc(size) else { return false }
                    memset(block, 1, size)
                    blocks.append(block)
                }
                return true
            }
            guard round(), let before = Self.minorFaults(), round(), let after = Self.minorFaults() else { return }
            outcome.withLock { $0 = after - before }
        }
        thread.start()
        done.wait()
        let faults = try #require(outcome.withLock { $0 })
        #expect(faults < 128, "the second round faulted \(faults) pages in")
    }
}
