#!/usr/bin/env python3
"""Seals parameters the way a device does, with Python's `cryptography` (an
implementation independent of ENS's OpenSSL wrapper), under the user's public key, in
either form ENS opens (docs/api.md, "Sealed parameters"):

  chunked    RSA PKCS#1 v1.5, the plaintext in chunks of at most k-11 bytes, the
             ciphertexts joined, base64
  envelope   "e1:" and base64 of: RSA PKCS#1 v1.5 of a random 32-byte key, a 12-byte
             nonce, the plaintext under AES-256-GCM with that key (associated data
             "ens-envelope/1") and its 16-byte tag

Usage: seal.py PEM_FILE [--envelope [--key-length N]] < requests.json > sealed.json
requests.json is a JSON list of plaintext strings; the output is a JSON list of sealed
strings in the same order. --key-length seals an envelope whose key block holds N bytes
instead of 32 (ENS must refuse it).
"""
import base64
import json
import os
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ENVELOPE_PREFIX = "e1:"
ENVELOPE_ASSOCIATED_DATA = b"ens-envelope/1"


def seal(public_key, plaintext: bytes) -> str:
    k = public_key.key_size // 8
    chunk = k - 11
    pieces = [plaintext[i:i + chunk] for i in range(0, max(len(plaintext), 1), chunk)]
    return base64.b64encode(b"".join(public_key.encrypt(p, padding.PKCS1v15()) for p in pieces)).decode()


def envelope(public_key, plaintext: bytes, key_length: int = 32) -> str:
    key = os.urandom(32)
    nonce = os.urandom(12)
    # The key block normally carries the AES key itself; other lengths make a block ENS
    # must refuse (its first 32 bytes, padded with more random bytes, are not a key).
    carried = (key + os.urandom(max(0, key_length - 32)))[:key_length]
    block = public_key.encrypt(carried, padding.PKCS1v15())
    sealed = AESGCM(key).encrypt(nonce, plaintext, ENVELOPE_ASSOCIATED_DATA)
    return ENVELOPE_PREFIX + base64.b64encode(block + nonce + sealed).decode()


def main() -> None:
    arguments = sys.argv[1:]
    with open(arguments[0], "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    key_length = int(arguments[arguments.index("--key-length") + 1]) if "--key-length" in arguments else 32
    requests = json.load(sys.stdin)
    if "--envelope" in arguments:
        json.dump([envelope(public_key, r.encode(), key_length) for r in requests], sys.stdout)
    else:
        json.dump([seal(public_key, r.encode()) for r in requests], sys.stdout)


if __name__ == "__main__":
    main()
