#!/usr/bin/env python3
"""A software WebAuthn authenticator and client for the tests, with an independent verifier.

    python3 Tests/Tools/soft-authenticator.py < command.json > answer.json

Makes real registration and authentication responses (the W3C WebAuthn Level 3 JSON forms) for
ES256, EdDSA and RS256 keys, with `none` and `packed` (self and x5c) attestation, from the options a
relying party sent; a command may bend one part (origin, RP ID, type, flags, sign count, signature)
to make the response a test needs refused. Every response is also checked by py_webauthn against
the same options, and its verdict returned beside it, so a test can hold the worker to agree.

Commands (one JSON object on stdin):
  {"op": "create", "options": {...creation options...}, "origin": "...", "alg": "ES256",
   "attestation": "none" | "packed-self" | "packed-x5c", ...bends...,
   "verify": {"origins": [...], "require_uv": true, "challenge": "b64url (default: the options')"}}
  {"op": "get", "options": {...request options...}, "origin": "...", "credential": {...from create...},
   "sign_count": 5, ...bends..., "verify": {..., "public_key": "b64url COSE", "sign_count": 4}}
Bends: "rp_id", "type", "challenge", "cross_origin", "flags": {"up","uv","be","bs": bool},
"bad_signature", "credential_id" (b64url), "user_handle" (b64url or null), "cert_ou".
"""
import base64
import datetime
import hashlib
import json
import os
import sys

import cbor2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import NameOID


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# ES384 is here to be refused: the worker offers only the other three.
ALGS = {"ES256": -7, "EdDSA": -8, "RS256": -257, "ES384": -35}


def new_key(alg):
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "ES384":
        return ec.generate_private_key(ec.SECP384R1())
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def cose_key(key, alg):
    public = key.public_key()
    if alg == "ES256":
        numbers = public.public_numbers()
        return {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
    if alg == "ES384":
        numbers = public.public_numbers()
        return {1: 2, 3: -35, -1: 2, -2: numbers.x.to_bytes(48, "big"), -3: numbers.y.to_bytes(48, "big")}
    if alg == "EdDSA":
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {1: 1, 3: -8, -1: 6, -2: raw}
    numbers = public.public_numbers()
    return {1: 3, 3: -257, -1: numbers.n.to_bytes(256, "big"), -2: numbers.e.to_bytes(3, "big")}


def sign(key, alg, data):
    if alg == "ES256":
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if alg == "ES384":
        return key.sign(data, ec.ECDSA(hashes.SHA384()))
    if alg == "EdDSA":
        return key.sign(data)
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def flags_byte(command, default_uv, attested):
    flags = {"up": True, "uv": default_uv, "be": True, "bs": True}
    flags.update(command.get("flags", {}))
    value = 0
    value |= 0x01 if flags["up"] else 0
    value |= 0x04 if flags["uv"] else 0
    value |= 0x08 if flags["be"] else 0
    value |= 0x10 if flags["bs"] else 0
    value |= 0x40 if attested else 0
    return value


def client_data(command, kind, options):
    data = {
        "type": command.get("type", kind),
        "challenge": command.get("challenge", options["challenge"]),
        "origin": command["origin"],
        "crossOrigin": command.get("cross_origin", False),
    }
    return json.dumps(data, separators=(",", ":")).encode()


def attestation_certificates(aaguid, ou):
    """A root and a leaf meeting WebAuthn §8.2.1 (its OU bendable), the leaf's key ES256."""
    now = datetime.datetime.now(datetime.timezone.utc)
    root_key = ec.generate_private_key(ec.SECP256R1())
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Soft Authenticator Root")])
    root = (
        x509.CertificateBuilder().subject_name(root_name).issuer_name(root_name)
        .public_key(root_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(root_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Soft Authenticators"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
        x509.NameAttribute(NameOID.COMMON_NAME, "Soft Authenticator"),
    ])
    leaf = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(root_name)
        .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.45724.1.1.4"), b"\x04\x10" + aaguid),
            critical=False)
        .sign(root_key, hashes.SHA256())
    )
    return leaf_key, [leaf.public_bytes(serialization.Encoding.DER), root.public_bytes(serialization.Encoding.DER)]


def create(command):
    options = command["options"]
    alg = command.get("alg", "ES256")
    key = new_key(alg)
    credential_id = unb64url(command["credential_id"]) if "credential_id" in command else os.urandom(32)
    aaguid = bytes.fromhex("00112233445566778899aabbccddeeff")
    rp_id = command.get("rp_id", options["rp"]["id"])
    uv = options.get("authenticatorSelection", {}).get("userVerification", "preferred") != "discouraged"
    cose = cbor2.dumps(cose_key(key, alg), canonical=True)
    sign_count = command.get("sign_count", 0)
    auth_data = (
        hashlib.sha256(rp_id.encode()).digest() + bytes([flags_byte(command, uv, True)])
        + sign_count.to_bytes(4, "big") + aaguid + len(credential_id).to_bytes(2, "big") + credential_id + cose
    )
    client_data_json = client_data(command, "webauthn.create", options)
    signed = auth_data + hashlib.sha256(client_data_json).digest()
    attestation = command.get("attestation", "none")
    if attestation == "none":
        fmt, statement = "none", {}
    elif attestation == "packed-self":
        fmt, statement = "packed", {"alg": ALGS[alg], "sig": sign(key, alg, signed)}
    else:
        leaf_key, chain = attestation_certificates(aaguid, command.get("cert_ou", "Authenticator Attestation"))
        fmt, statement = "packed", {"alg": -7, "sig": sign(leaf_key, "ES256", signed), "x5c": chain}
    if command.get("bad_signature") and "sig" in statement:
        statement["sig"] = statement["sig"][:-1] + bytes([statement["sig"][-1] ^ 1])
    attestation_object = cbor2.dumps({"fmt": fmt, "attStmt": statement, "authData": auth_data}, canonical=True)
    public_der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    response = {
        "id": b64url(credential_id),
        "rawId": b64url(credential_id),
        "type": "public-key",
        "response": {
            "clientDataJSON": b64url(client_data_json),
            "attestationObject": b64url(attestation_object),
            "authenticatorData": b64url(auth_data),
            "transports": ["internal", "hybrid"],
            "publicKey": b64url(public_der),
            "publicKeyAlgorithm": ALGS[alg],
        },
        "authenticatorAttachment": "platform",
        "clientExtensionResults": {"credProps": {"rk": True}},
    }
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {
        "response": response,
        "credential": {
            "private_key": private.decode(), "alg": alg, "credential_id": b64url(credential_id),
            "user_handle": options["user"]["id"], "public_key": b64url(cose),
        },
        "py_webauthn": verify_registration(command, options, response),
    }


def get(command):
    options = command["options"]
    credential = command["credential"]
    alg = credential["alg"]
    key = serialization.load_pem_private_key(credential["private_key"].encode(), password=None)
    rp_id = command.get("rp_id", options["rpId"])
    uv = options.get("userVerification", "preferred") != "discouraged"
    auth_data = (
        hashlib.sha256(rp_id.encode()).digest() + bytes([flags_byte(command, uv, False)])
        + command.get("sign_count", 0).to_bytes(4, "big")
    )
    client_data_json = client_data(command, "webauthn.get", options)
    signature = sign(key, alg, auth_data + hashlib.sha256(client_data_json).digest())
    if command.get("bad_signature"):
        signature = signature[:-1] + bytes([signature[-1] ^ 1])
    credential_id = command.get("credential_id", credential["credential_id"])
    user_handle = command["user_handle"] if "user_handle" in command else credential["user_handle"]
    response = {
        "id": credential_id,
        "rawId": credential_id,
        "type": "public-key",
        "response": {
            "clientDataJSON": b64url(client_data_json),
            "authenticatorData": b64url(auth_data),
            "signature": b64url(signature),
        },
        "authenticatorAttachment": "platform",
        "clientExtensionResults": {},
    }
    if user_handle is not None:
        response["response"]["userHandle"] = user_handle
    return {"response": response, "py_webauthn": verify_authentication(command, options, response)}


def verify_registration(command, options, response):
    from webauthn import verify_registration_response
    from webauthn.helpers.structs import COSEAlgorithmIdentifier

    verify = command.get("verify", {})
    try:
        result = verify_registration_response(
            credential=response,
            expected_challenge=unb64url(verify.get("challenge", options["challenge"])),
            expected_origin=verify.get("origins", [command["origin"]]),
            expected_rp_id=options["rp"]["id"],
            require_user_verification=verify.get("require_uv", True),
            supported_pub_key_algs=[COSEAlgorithmIdentifier(p["alg"]) for p in options["pubKeyCredParams"]],
        )
        return {"verified": True, "fmt": str(getattr(result.fmt, "value", result.fmt)), "sign_count": result.sign_count}
    except Exception as error:  # noqa: BLE001 - py_webauthn's refusals are several exception types
        return {"verified": False, "error": f"{type(error).__name__}: {error}"}


def verify_authentication(command, options, response):
    from webauthn import verify_authentication_response

    verify = command.get("verify", {})
    try:
        result = verify_authentication_response(
            credential=response,
            expected_challenge=unb64url(verify.get("challenge", options["challenge"])),
            expected_rp_id=options["rpId"],
            expected_origin=verify.get("origins", [command["origin"]]),
            credential_public_key=unb64url(verify["public_key"]),
            credential_current_sign_count=verify.get("sign_count", 0),
            require_user_verification=verify.get("require_uv", True),
        )
        return {"verified": True, "sign_count": result.new_sign_count}
    except Exception as error:  # noqa: BLE001
        return {"verified": False, "error": f"{type(error).__name__}: {error}"}


def main():
    command = json.load(sys.stdin)
    answer = create(command) if command["op"] == "create" else get(command)
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
