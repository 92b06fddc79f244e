import COpenSSL
import JOSE

/// Attestation statements this service verifies (WebAuthn L3 §8). Only `packed` carries a
/// signature to check here; `none` carries nothing, and other formats are taken as `none`.
enum Attestation {
    static let field = WebAuthnCeremony.attestationField

    /// §8.2: `packed`, self-attested (signed by the credential's own key, `alg` matching it) or
    /// with `x5c` (signed by the leaf certificate's key, which meets §8.2.1).
    static func verifyPacked(
        _ statement: CBORValue, authenticatorData: AuthenticatorData, clientDataHash: [UInt8],
        credential: AuthenticatorData.AttestedCredential
    ) throws(WebAuthnFailure) {
        guard let alg = statement["alg"]?.integerValue, let signature = statement["sig"]?.bytesValue else {
            throw .malformed(field, "a packed statement needs alg and sig")
        }
        let signed = authenticatorData.bytes + clientDataHash
        guard let certificates = statement["x5c"] else {
            guard alg == credential.publicKey.algorithm.rawValue else {
                throw .rejected(field, "the self attestation's alg \(alg) is not the credential key's")
            }
            guard credential.publicKey.verify(signature: signature, message: signed) else {
                throw .rejected(field, "the self attestation's signature does not verify")
            }
            return
        }
        guard case .array(let chain) = certificates, let leafValue = chain.first, let leaf = leafValue.bytesValue,
            chain.allSatisfy({ $0.bytesValue != nil })
        else {
            throw .malformed(field, "x5c must be a non-empty array of certificates")
        }
        guard let algorithm = COSEAlgorithm(rawValue: alg) else {
            throw .rejected(field, "attestation algorithm \(alg) is not supported")
        }
        let key: PublicKey
        do {
            key = try PublicKey.certificate(der: leaf)
        } catch {
            throw .rejected(field, "the attestation certificate is not acceptable: \(error)")
        }
        guard key.fits(algorithm.jws) else {
            throw .rejected(field, "the attestation certificate's key does not fit alg \(alg)")
        }
        try AttestationCertificate.check(leaf, aaguid: credential.aaguid)
        guard Signature.verify(signature, message: signed, key: key, algorithm: algorithm) else {
            throw .rejected(field, "the attestation signature does not verify")
        }
    }
}

/// §8.2.1: what a packed attestation's leaf certificate must be.
enum AttestationCertificate {
    /// `id-fido-gen-ce-aaguid`: the authenticator model the certificate is for.
    static let aaguidOID = "1.3.6.1.4.1.45724.1.1.4"

    static func check(_ der: [UInt8], aaguid: [UInt8]) throws(WebAuthnFailure) {
        let field = Attestation.field
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let certificate = parsed else {
            ERR_clear_error()
            throw .rejected(field, "the attestation certificate is not DER X.509")
        }
        defer { X509_free(certificate) }
        guard X509_get_version(certificate) == 2 else {
            throw .rejected(field, "the attestation certificate must be version 3")
        }
        guard let subject = X509_get_subject_name(certificate) else {
            throw .rejected(field, "the attestation certificate has no subject")
        }
        func entry(_ nid: Int32) -> String? {
            let index = X509_NAME_get_index_by_NID(subject, nid, -1)
            guard index >= 0, let item = X509_NAME_get_entry(subject, index),
                let data = X509_NAME_ENTRY_get_data(item)
            else { return nil }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, data)
            guard length >= 0, let utf8 else { return nil }
            defer { CRYPTO_free(utf8, nil, 0) }
            return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
        }
        guard let country = entry(NID_countryName), country.utf8.count == 2 else {
            throw .rejected(field, "the attestation certificate's subject needs a country (C)")
        }
        guard let organization = entry(NID_organizationName), !organization.isEmpty else {
            throw .rejected(field, "the attestation certificate's subject needs an organization (O)")
        }
        guard entry(NID_organizationalUnitName) == "Authenticator Attestation" else {
            throw .rejected(field, "the attestation certificate's OU must be \"Authenticator Attestation\"")
        }
        guard let commonName = entry(NID_commonName), !commonName.isEmpty else {
            throw .rejected(field, "the attestation certificate's subject needs a common name (CN)")
        }
        // Not a certificate authority (basic constraints CA false, or none).
        guard X509_check_ca(certificate) == 0 else {
            throw .rejected(field, "the attestation certificate must not be a CA")
        }
        guard let oid = OBJ_txt2obj(aaguidOID, 1) else { return }
        defer { ASN1_OBJECT_free(oid) }
        let index = X509_get_ext_by_OBJ(certificate, oid, -1)
        guard index >= 0 else { return }
        guard let extensionItem = X509_get_ext(certificate, index), X509_EXTENSION_get_critical(extensionItem) == 0,
            let value = X509_EXTENSION_get_data(extensionItem)
        else {
            throw .rejected(field, "the attestation certificate's AAGUID extension must not be critical")
        }
        let length = Int(ASN1_STRING_length(value))
        guard let bytes = ASN1_STRING_get0_data(value) else {
            throw .rejected(field, "the attestation certificate's AAGUID extension is empty")
        }
        let content = Array(UnsafeBufferPointer(start: bytes, count: length))
        // An OCTET STRING of the 16 AAGUID bytes.
        guard content.count == 18, content[0] == 0x04, content[1] == 0x10, Array(content[2...]) == aaguid else {
            throw .rejected(field, "the attestation certificate's AAGUID is not the authenticator data's")
        }
    }
}
