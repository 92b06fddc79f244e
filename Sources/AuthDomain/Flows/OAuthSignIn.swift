import Foundation
import Messages

extension LoginFlows {
    // MARK: - OAuth 2.0 sign-in (GitHub, Discord, Naver, X, Facebook Login)

    /// `oauth`: the app's authorization code, with the PKCE verifier it made, exchanged at the
    /// provider; the profile the provider answers names the identity, which is then found, linked
    /// or created as an OpenID Connect one is (only a verified address links; the second factor
    /// gate applies). The provider's access token is used for the profile and dropped.
    ///
    /// The code is single use at the provider: a request redelivered after the exchange but
    /// before its commit exchanges it again and is answered `invalid_code`, with nothing written.
    func prepareOAuthSignIn(_ request: LoginRequest) async throws -> any PreparedWrite {
        let data = request.data
        let name = data.provider ?? ""
        guard let provider = providers.oauth(name) else {
            throw LoginError(.unknownProvider, "provider \(name.prefix(64)) is not configured", field: "data.provider")
        }
        let redirectURI = data.redirectURI ?? ""
        guard provider.configuration.redirectURIs.contains(redirectURI) else {
            throw LoginError(
                .malformedRequest, "redirect_uri is not one registered for provider \(name)", field: "data.redirect_uri"
            )
        }
        let verifier = data.codeVerifier ?? ""
        guard Self.isPKCEVerifier(verifier) else {
            throw LoginError(
                .malformedRequest, "code_verifier must be 43 to 128 of A-Z a-z 0-9 - . _ ~ (PKCE, RFC 7636 §4.1)",
                field: "data.code_verifier")
        }
        // Checked before the exchange, which spends the code.
        let linkTo = try data.linkTo.map {
            try presentedToken($0, field: "data.link_to", allowExpired: false, at: clock.now())
        }
        let verified = try await provider.signIn(code: data.code ?? "", verifier: verifier, redirectURI: redirectURI)
        return try providerSignIn(request, verified: verified, linkTo: linkTo, at: clock.now())
    }

    /// RFC 7636 §4.1: `code_verifier = 43*128unreserved`.
    static func isPKCEVerifier(_ verifier: String) -> Bool {
        (43...128).contains(verifier.utf8.count)
            && verifier.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                    UInt8(ascii: "~"):
                    true
                default: false
                }
            }
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    /// Calls the provider: in a task of its own, beside the pipeline.
    static let oauthSignIn = MethodHandler(audited: true, .callsOut { try await $0.prepareOAuthSignIn($1) })
}
