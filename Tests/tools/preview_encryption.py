#!/usr/bin/env python3
"""ENS preview encryption, version 1 (docs/privacy.md), written again with Python's
`cryptography`: an implementation independent of ENS's OpenSSL wrapper, for the unit
tests' cross-checks (PreviewEncryptionTests) and for making the documented test vector.

Blob: 0x01 || E (65-byte uncompressed ephemeral point) || nonce (12) || ciphertext || tag (16);
K = HKDF-SHA256(ECDH(e, R), salt = E || R, info = "ENS preview v1"), AES-256-GCM under K
with the notification id (ASCII) as associated data. Every byte string is hex on the
command line and in the output.

Usage:
  preview_encryption.py encrypt RECIPIENT_POINT NOTIFICATION_ID PLAINTEXT...
      a JSON list: one blob per plaintext
  preview_encryption.py decrypt RECIPIENT_SCALAR NOTIFICATION_ID BLOB...
      a JSON list: one plaintext per blob, null for a blob that does not open
  preview_encryption.py vector RECIPIENT_SCALAR EPHEMERAL_SCALAR NONCE NOTIFICATION_ID PLAINTEXT
      the test vector block of docs/privacy.md: `name: value` lines, inputs,
      intermediate values (Z, K) and the blob
"""
import json
import os
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

VERSION = 1
INFO = b"ENS preview v1"
POINT_SIZE = 65
NONCE_SIZE = 12
TAG_SIZE = 16


def private_key(scalar_hex: str) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(int(scalar_hex, 16), ec.SECP256R1())


def point(key) -> bytes:
    return key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def message_key(shared: bytes, ephemeral_point: bytes, recipient_point: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral_point + recipient_point, info=INFO).derive(shared)


def encrypt(recipient_point: bytes, notification_id: str, plaintext: bytes,
            ephemeral: ec.EllipticCurvePrivateKey = None, nonce: bytes = None) -> dict:
    """The blob and the values on the way to it (for `vector`)."""
    if len(recipient_point) != POINT_SIZE or recipient_point[0] != 4:
        raise ValueError("recipient key must be a 65-byte uncompressed point")
    recipient = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), recipient_point)
    ephemeral = ephemeral or ec.generate_private_key(ec.SECP256R1())
    nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
    ephemeral_point = point(ephemeral.public_key())
    shared = ephemeral.exchange(ec.ECDH(), recipient)
    key = message_key(shared, ephemeral_point, recipient_point)
    sealed = AESGCM(key).encrypt(nonce, plaintext, notification_id.encode("ascii"))
    return {
        "ephemeral_public_key": ephemeral_point,
        "shared_secret": shared,
        "message_key": key,
        "blob": bytes([VERSION]) + ephemeral_point + nonce + sealed,
    }


def decrypt(recipient: ec.EllipticCurvePrivateKey, notification_id: str, blob: bytes):
    """The plaintext, or None when the blob does not open."""
    if len(blob) < 1 + POINT_SIZE + NONCE_SIZE + TAG_SIZE or blob[0] != VERSION:
        return None
    ephemeral_point = blob[1:1 + POINT_SIZE]
    nonce = blob[1 + POINT_SIZE:1 + POINT_SIZE + NONCE_SIZE]
    try:
        ephemeral = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), ephemeral_point)
        key = message_key(recipient.exchange(ec.ECDH(), ephemeral), ephemeral_point, point(recipient.public_key()))
        return AESGCM(key).decrypt(nonce, blob[1 + POINT_SIZE + NONCE_SIZE:], notification_id.encode("ascii"))
    except (ValueError, InvalidTag):
        return None


def main(argv) -> int:
    command, arguments = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if command == "encrypt":
        recipient_point, notification_id = bytes.fromhex(arguments[0]), arguments[1]
        print(json.dumps([encrypt(recipient_point, notification_id, bytes.fromhex(p))["blob"].hex() for p in arguments[2:]]))
    elif command == "decrypt":
        recipient, notification_id = private_key(arguments[0]), arguments[1]
        plaintexts = (decrypt(recipient, notification_id, bytes.fromhex(blob)) for blob in arguments[2:])
        print(json.dumps([None if p is None else p.hex() for p in plaintexts]))
    elif command == "vector":
        recipient_scalar, ephemeral_scalar, nonce, notification_id, plaintext = arguments
        recipient = private_key(recipient_scalar)
        ephemeral = private_key(ephemeral_scalar)
        result = encrypt(point(recipient.public_key()), notification_id, bytes.fromhex(plaintext),
                         ephemeral=ephemeral, nonce=bytes.fromhex(nonce))
        lines = [
            ("recipient_private_key", recipient_scalar),
            ("recipient_public_key", point(recipient.public_key()).hex()),
            ("ephemeral_private_key", ephemeral_scalar),
            ("ephemeral_public_key", result["ephemeral_public_key"].hex()),
            ("notification_id", notification_id),
            ("nonce", nonce),
            ("plaintext", plaintext),
            ("shared_secret", result["shared_secret"].hex()),
            ("message_key", result["message_key"].hex()),
            ("blob", result["blob"].hex()),
        ]
        print("\n".join(f"{name}: {value}" for name, value in lines))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
