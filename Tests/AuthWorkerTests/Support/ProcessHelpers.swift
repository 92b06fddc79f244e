import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Collects a child process's output as it arrives, so tests can wait for a log line.
final class LogCollector: Sendable {
    private let text = Mutex("")

    init(_ pipe: Pipe) {
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                return
            }
            self?.append(String(decoding: data, as: UTF8.self))
        }
    }

    private func append(_ chunk: String) {
        text.withLock { $0 += chunk }
    }

    func all() async -> String {
        try? await Task.sleep(for: .milliseconds(200))
        return text.withLock { $0 }
    }

    /// The value of a JSON log field in the first line containing `marker`, waiting up to `timeout`.
    func value(of field: String, inLineWith marker: String, timeout: Duration = .seconds(20)) async -> String? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let lines = text.withLock { $0 }.split(separator: "\n")
            if let line = lines.first(where: { $0.contains(marker) }),
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let value = object[field] as? String
            {
                return value
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }
}

/// A plain HTTP GET for probing the worker's health endpoint.
enum HTTP {
    static func get(_ url: String) async throws -> (status: Int, body: String) {
        guard let url = URL(string: url) else { throw URLError(.badURL) }
        let (data, response) = try await URLSession.shared.data(from: url)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}
