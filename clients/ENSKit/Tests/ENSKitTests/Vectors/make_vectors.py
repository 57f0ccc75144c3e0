#!/usr/bin/env python3
"""Test vectors for ENSKit, made with Python's `cryptography`: an implementation
independent of ENSKit's (swift-crypto), so the unit tests cross-check the two.

  make_vectors.py > blind.json

blind.json: Microsoft Graph's encrypted resource data (rich change notifications) as
Microsoft documents it: a random 32-byte key wrapped with RSA-OAEP (SHA-1, MGF1-SHA-1)
under the device's public key (`dataKey`), the resource JSON encrypted with AES-256-CBC
and PKCS#7 padding, IV = the key's first 16 bytes (`data`), and HMAC-SHA256 under the
key over the ciphertext (`dataSignature`); everything base64. The device key has a
self-signed certificate, and each content names it as ENS names certificates to Graph
(`encryptionCertificateId`: the first 16 bytes of SHA-256 of its DER, lowercase hex;
`encryptionCertificateThumbprint`: uppercase hex SHA-1). Besides the good case: a vector
whose data was altered after signing, one wrapped to another key, and a content
encrypted to a rotated (newer) key of the same device.
"""
import base64
import hashlib
import hmac
import json
import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, padding as sympadding, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.x509.oid import NameOID


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def certificate(key) -> bytes:
    """A self-signed certificate for `key`, valid 2025-2035 (the vectors do not expire)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ens-device")])
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc))
             .not_valid_after(datetime.datetime(2035, 1, 1, tzinfo=datetime.timezone.utc))
             .sign(key, hashes.SHA256()))
    return built.public_bytes(serialization.Encoding.DER)


def encrypt(public_key, resource: bytes, der: bytes):
    key = os.urandom(32)
    padder = sympadding.PKCS7(128).padder()
    padded = padder.update(resource) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    data = encryptor.update(padded) + encryptor.finalize()
    signature = hmac.new(key, data, hashlib.sha256).digest()
    wrapped = public_key.encrypt(key, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    return {"data": b64(data), "dataKey": b64(wrapped), "dataSignature": b64(signature),
            "encryptionCertificateId": hashlib.sha256(der).digest()[:16].hex(),
            "encryptionCertificateThumbprint": hashlib.sha1(der).hexdigest().upper()}


def pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def main():
    device = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    device_der, other_der, rotated_der = certificate(device), certificate(other), certificate(rotated)
    resource = {"@odata.type": "#Microsoft.Graph.Message", "id": "AAMkAGI2TG93AAA=",
                "subject": "Quarterly numbers \u2014 d\u00e9j\u00e0 vu", "receivedDateTime": "2026-11-27T10:15:00Z",
                "from": {"emailAddress": {"name": "Bea Finance", "address": "bea@contoso.test"}}}
    plaintext = json.dumps(resource, ensure_ascii=False).encode("utf-8")
    rotated_resource = json.dumps(dict(resource, id="AAMkAGI2TG94AAA=", subject="After the rotation",
                                       **{"from": {"emailAddress": {"name": "", "address": "carol@contoso.test"}}})).encode("utf-8")
    good = encrypt(device.public_key(), plaintext, device_der)
    altered = dict(good)
    data = bytearray(base64.b64decode(good["data"]))
    data[-1] ^= 0x01
    altered["data"] = b64(bytes(data))
    print(json.dumps({
        "device_private_key_pem": pem(device),
        "device_certificate": b64(device_der),
        "rotated_private_key_pem": pem(rotated),
        "rotated_certificate": b64(rotated_der),
        "resource": plaintext.decode("utf-8"),
        "good": good,
        "altered_data": altered,
        "other_key": encrypt(other.public_key(), plaintext, other_der),
        "rotated": encrypt(rotated.public_key(), rotated_resource, rotated_der),
    }, indent=2))


if __name__ == "__main__":
    main()
