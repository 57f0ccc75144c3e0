#!/usr/bin/env python3
"""A PKCS#12 bundle (RFC 7292) assembled by hand with Python's `cryptography`: an
implementation independent of OpenSSL's PKCS12 code, for PKCS12BoundTests.

No exporter writes more than a couple of encrypted safes, so an attacker's bundle that
asks for many key derivations, each under ENS's per-derivation cap, has to be made
like this: a fresh P-256 key and self-signed certificate, the certificate in one
encrypted safe, the key as a shrouded key bag in a plain safe, EXTRA more encrypted
safes (each holding no bags), and a SHA-256 MAC over it all. Every encryption is
PBES2 (PBKDF2-HMAC-SHA256, AES-256-CBC) with ITERATIONS, as is the MAC's PKCS#12 KDF.
The extra safes share one salt and IV, so making them costs one derivation, while a
reader that opens them all runs one each.

Usage:
  pkcs12_safes.py PASSWORD ITERATIONS EXTRA
      the bundle, DER, on standard output
"""
import datetime
import hashlib
import hmac
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, padding, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from cryptography.x509.oid import NameOID


# DER, just what PKCS#12 needs.
def tlv(tag, content):
    length = len(content)
    if length < 0x80:
        header = bytes([length])
    else:
        octets = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([0x80 | len(octets)]) + octets
    return bytes([tag]) + header + content


def seq(*items):
    return tlv(0x30, b"".join(items))


def integer(value):
    return tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def octets(data):
    return tlv(0x04, data)


def oid(dotted):
    parts = [int(p) for p in dotted.split(".")]
    body = bytes([40 * parts[0] + parts[1]])
    for part in parts[2:]:
        chunk = [part & 0x7F]
        part >>= 7
        while part:
            chunk.insert(0, 0x80 | (part & 0x7F))
            part >>= 7
        body += bytes(chunk)
    return tlv(0x06, body)


def explicit0(content):
    return tlv(0xA0, content)


DATA = "1.2.840.113549.1.7.1"
ENCRYPTED_DATA = "1.2.840.113549.1.7.6"
PBES2 = "1.2.840.113549.1.5.13"
PBKDF2 = "1.2.840.113549.1.5.12"
HMAC_SHA256 = "1.2.840.113549.2.9"
AES256_CBC = "2.16.840.1.101.3.4.1.42"
SHA256 = "2.16.840.1.101.3.4.2.1"
KEY_BAG_SHROUDED = "1.2.840.113549.1.12.10.1.2"
CERT_BAG = "1.2.840.113549.1.12.10.1.3"
X509_CERTIFICATE = "1.2.840.113549.1.9.22.1"
NULL = b"\x05\x00"


def pbes2(password, iterations, plaintext, salt=None, iv=None):
    """(AlgorithmIdentifier, ciphertext) of PBES2 with PBKDF2-HMAC-SHA256 and AES-256-CBC."""
    salt = salt or os.urandom(16)
    iv = iv or os.urandom(16)
    key = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=iterations).derive(password.encode())
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    ciphertext = encryptor.update(padded) + encryptor.finalize()
    algorithm = seq(oid(PBES2), seq(
        seq(oid(PBKDF2), seq(octets(salt), integer(iterations), seq(oid(HMAC_SHA256), NULL))),
        seq(oid(AES256_CBC), octets(iv))))
    return algorithm, ciphertext


def encrypted_safe(algorithm, ciphertext):
    # ContentInfo(encryptedData, EncryptedData{0, EncryptedContentInfo{data, alg, [0] IMPLICIT}})
    content = seq(oid(DATA), algorithm, tlv(0x80, ciphertext))
    return seq(oid(ENCRYPTED_DATA), explicit0(seq(integer(0), content)))


def data_safe(safe_contents):
    return seq(oid(DATA), explicit0(octets(safe_contents)))


def pkcs12_kdf(password, salt, iterations, purpose, length):
    """RFC 7292 appendix B.2 with SHA-256 (u = 32, v = 64)."""
    u, v = 32, 64
    bmp = (password + "\0").encode("utf-16-be") if password is not None else b""
    d = bytes([purpose]) * v

    def fill(data):
        if not data:
            return b""
        n = v * ((len(data) + v - 1) // v)
        return (data * (n // len(data) + 1))[:n]

    i = fill(salt) + fill(bmp)
    out = b""
    while len(out) < length:
        a = hashlib.sha256(d + i).digest()
        for _ in range(iterations - 1):
            a = hashlib.sha256(a).digest()
        out += a
        b = fill(a)[:v]
        b_int = int.from_bytes(b, "big") + 1
        blocks = []
        for k in range(0, len(i), v):
            block = (int.from_bytes(i[k:k + v], "big") + b_int) % (1 << (8 * v))
            blocks.append(block.to_bytes(v, "big"))
        i = b"".join(blocks)
    return out[:length]


def main():
    password, iterations, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=2)).sign(key, hashes.SHA256()))

    cert_bag = seq(oid(CERT_BAG), explicit0(seq(oid(X509_CERTIFICATE), explicit0(octets(certificate.public_bytes(serialization.Encoding.DER))))))
    certificates = encrypted_safe(*pbes2(password, iterations, seq(cert_bag)))

    pkcs8 = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key_algorithm, key_ciphertext = pbes2(password, iterations, pkcs8)
    shrouded = seq(oid(KEY_BAG_SHROUDED), explicit0(seq(key_algorithm, octets(key_ciphertext))))
    keys = data_safe(seq(shrouded))

    empty = encrypted_safe(*pbes2(password, iterations, seq()))
    authenticated_safe = seq(certificates, keys, *([empty] * extra))

    salt = os.urandom(16)
    mac_key = pkcs12_kdf(password, salt, iterations, 3, 32)
    mac = hmac.new(mac_key, authenticated_safe, hashlib.sha256).digest()
    mac_data = seq(seq(seq(oid(SHA256), NULL), octets(mac)), octets(salt), integer(iterations))
    pfx = seq(integer(3), data_safe(authenticated_safe), mac_data)
    sys.stdout.buffer.write(pfx)


if __name__ == "__main__":
    main()
