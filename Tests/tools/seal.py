#!/usr/bin/env python3
"""Seals parameters the way a device does, with Python's `cryptography` (an
implementation independent of ENS's OpenSSL wrapper): RSA PKCS#1 v1.5 under the user's
public key, plaintext split into chunks of at most k-11 bytes, ciphertexts joined, base64.

Usage: seal.py PEM_FILE < requests.json > sealed.json
requests.json is a JSON list of plaintext strings; the output is a JSON list of base64
strings in the same order.
"""
import base64
import json
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding


def seal(public_key, plaintext: bytes) -> str:
    k = public_key.key_size // 8
    chunk = k - 11
    pieces = [plaintext[i:i + chunk] for i in range(0, max(len(plaintext), 1), chunk)]
    return base64.b64encode(b"".join(public_key.encrypt(p, padding.PKCS1v15()) for p in pieces)).decode()


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    requests = json.load(sys.stdin)
    json.dump([seal(public_key, r.encode()) for r in requests], sys.stdout)


if __name__ == "__main__":
    main()
