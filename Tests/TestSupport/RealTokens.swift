import Foundation
import Testing

/// Real Sign in with Apple and Google tokens from the shared test data, with the key set file that
/// signed each and its claims.
enum RealTokens {
    struct Sample {
        var token: String
        var jwksFile: String
        var claims: [String: Any]
    }

    static func samples(_ provider: String) throws -> [Sample] {
        let list = try #require(try SharedTestData.json("real/\(provider)/tokens_verified.json") as? [[String: Any]])
        return list.compactMap { entry in
            guard let token = entry["token"] as? String, let file = entry["jwks_file"] as? String,
                let claims = entry["claims"] as? [String: Any]
            else { return nil }
            return Sample(token: token, jwksFile: file, claims: claims)
        }
    }
}
