#!/usr/bin/env python3
"""Exchange callback URLs of the older, credential-carrying form, made with Python's
`cryptography` (an implementation independent of ENS's) from ENS's documented
construction (docs/exchange.md, Sources/ENSVault/CallbackToken.swift):

  suffix  = "<record>/<generation>/" + base64url(sealed || mac), no padding
  sealed  = nonce(12) || AES-256-GCM(key, payload, aad = "ens-callback/1/<record>/<generation>")
  key     = HMAC-SHA256(HMAC-SHA256(master, "ens/v1/callback-seal"), "record/<record>/" || key material)
  mac     = HMAC-SHA256(HMAC-SHA256(master, "ens/v1/callback-mac"), aad || "/" || sealed)[:16]
  payload = 0x01, then tag-length-value fields (tag byte, 2-byte big-endian length):
            1 method (1 = basic), 2 user name, 3 password

The key material is the record's sealed private key (EnsSubscriptionInfo.private_key_sealed).
Used by bench/b6-split.sh (B6 with URLs that carry credentials, beside keyed URLs whose
credentials are in the database) and by SplitCredentialsTests.

  callback_url.py carrying MASTER_HEX RECORD GENERATION KEY_MATERIAL_HEX USER PASSWORD
      prints the suffix (what follows /ews/).
"""
import base64
import hashlib
import hmac
import os
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def _derived(master, label):
    return hmac.new(master, label.encode(), hashlib.sha256).digest()


def _field(tag, value):
    return bytes([tag, len(value) >> 8, len(value) & 0xFF]) + value


def basic_payload(user, password):
    return bytes([1]) + _field(1, bytes([1])) + _field(2, user.encode()) + _field(3, password.encode())


def carrying_suffix(master, record, generation, key_material, payload):
    header = f"ens-callback/1/{record}/{generation}".encode()
    key = hmac.new(_derived(master, "ens/v1/callback-seal"), f"record/{record}/".encode() + key_material,
                   hashlib.sha256).digest()
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(key).encrypt(nonce, payload, header)
    mac = hmac.new(_derived(master, "ens/v1/callback-mac"), header + b"/" + sealed, hashlib.sha256).digest()[:16]
    blob = base64.urlsafe_b64encode(sealed + mac).decode().rstrip("=")
    return f"{record}/{generation}/{blob}"


def main(argv):
    if len(argv) != 8 or argv[1] != "carrying":
        sys.stderr.write(__doc__)
        return 2
    master, record, generation = bytes.fromhex(argv[2]), int(argv[3]), int(argv[4])
    print(carrying_suffix(master, record, generation, bytes.fromhex(argv[5]), basic_payload(argv[6], argv[7])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
