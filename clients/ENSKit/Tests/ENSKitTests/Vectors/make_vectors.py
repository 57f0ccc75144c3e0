#!/usr/bin/env python3
"""Test vectors for ENSKit, made with Python's `cryptography`: an implementation
independent of ENSKit's (swift-crypto), so the unit tests cross-check the two.

  make_vectors.py > blind.json

blind.json: Microsoft Graph's encrypted resource data (rich change notifications) as
Microsoft documents it: a random 32-byte key wrapped with RSA-OAEP (SHA-1, MGF1-SHA-1)
under the device's public key (`dataKey`), the resource JSON encrypted with AES-256-CBC
and PKCS#7 padding, IV = the key's first 16 bytes (`data`), and HMAC-SHA256 under the
key over the ciphertext (`dataSignature`); everything base64. Besides the good case: a
vector whose data was altered after signing, and one wrapped to another key.
"""
import base64
import hashlib
import hmac
import json
import os

from cryptography.hazmat.primitives import hashes, padding as sympadding, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def encrypt(public_key, resource: bytes):
    key = os.urandom(32)
    padder = sympadding.PKCS7(128).padder()
    padded = padder.update(resource) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    data = encryptor.update(padded) + encryptor.finalize()
    signature = hmac.new(key, data, hashlib.sha256).digest()
    wrapped = public_key.encrypt(key, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    return {"data": b64(data), "dataKey": b64(wrapped), "dataSignature": b64(signature),
            "encryptionCertificateId": "ens-device-1", "encryptionCertificateThumbprint": "3B9A1B2C3D4E5F60718293A4B5C6D7E8F9012345"}


def main():
    device = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    resource = {"@odata.type": "#Microsoft.Graph.Message", "id": "AAMkAGI2TG93AAA=",
                "subject": "Quarterly numbers \u2014 d\u00e9j\u00e0 vu", "receivedDateTime": "2026-11-27T10:15:00Z",
                "from": {"emailAddress": {"name": "Bea Finance", "address": "bea@contoso.test"}}}
    plaintext = json.dumps(resource, ensure_ascii=False).encode("utf-8")
    good = encrypt(device.public_key(), plaintext)
    altered = dict(good)
    data = bytearray(base64.b64decode(good["data"]))
    data[-1] ^= 0x01
    altered["data"] = b64(bytes(data))
    print(json.dumps({
        "device_private_key_pem": device.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()).decode(),
        "resource": plaintext.decode("utf-8"),
        "good": good,
        "altered_data": altered,
        "other_key": encrypt(other.public_key(), plaintext),
    }, indent=2))


if __name__ == "__main__":
    main()
