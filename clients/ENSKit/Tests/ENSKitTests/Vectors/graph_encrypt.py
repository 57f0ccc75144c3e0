#!/usr/bin/env python3
"""Microsoft Graph's side of a rich notification, with Python's `cryptography` (an
implementation independent of ENSKit's swift-crypto), for ENSKit's unit tests:

  graph_encrypt.py CERT_BASE64 RESOURCE_JSON
      Reads a device certificate (base64 DER) as ENS and Graph would: an X.509
      certificate whose RSA key Graph encrypts to, self-signed (its signature verifies
      under its own key). Prints {"certificate": {"bits", "notBefore", "notAfter"
      (seconds), "selfSigned"}, "encryptedContent": {...}} where encryptedContent is what
      Graph puts in the notification (Tests/tools/graph_simulator.py, encrypt_content):
      a fresh AES-256 key; data = AES-256-CBC, IV = key[:16], PKCS7; dataSignature =
      HMAC-SHA256(key, data); dataKey = RSA-OAEP (SHA-1, MGF1-SHA-1) of the key to the
      certificate; encryptionCertificateId = lowercase hex of the first 16 bytes of
      SHA-256(DER), as ENS names certificates to Graph; encryptionCertificateThumbprint =
      uppercase hex SHA-1(DER). Exit status 1 when the certificate is not usable.
"""
import base64
import hashlib
import hmac
import json
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, padding as sympadding
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def encrypted_content(der: bytes, public_key, plaintext: bytes) -> dict:
    key = os.urandom(32)
    padder = sympadding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    data = encryptor.update(padded) + encryptor.finalize()
    wrapped = public_key.encrypt(key, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    return {"data": b64(data), "dataKey": b64(wrapped), "dataSignature": b64(hmac.new(key, data, hashlib.sha256).digest()),
            "encryptionCertificateId": hashlib.sha256(der).digest()[:16].hex(),
            "encryptionCertificateThumbprint": hashlib.sha1(der).hexdigest().upper()}


def main():
    der = base64.b64decode(sys.argv[1], validate=True)
    certificate = x509.load_der_x509_certificate(der)
    public_key = certificate.public_key()
    if not isinstance(public_key, rsa.RSAPublicKey):
        sys.exit("not an RSA key")
    public_key.verify(certificate.signature, certificate.tbs_certificate_bytes, padding.PKCS1v15(),
                      certificate.signature_hash_algorithm)
    print(json.dumps({
        "certificate": {"bits": public_key.key_size, "notBefore": int(certificate.not_valid_before_utc.timestamp()),
                        "notAfter": int(certificate.not_valid_after_utc.timestamp()),
                        "selfSigned": certificate.issuer == certificate.subject},
        "encryptedContent": encrypted_content(der, public_key, sys.argv[2].encode("utf-8")),
    }))


if __name__ == "__main__":
    main()
