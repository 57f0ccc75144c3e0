#!/usr/bin/env python3
"""The device side of Microsoft Graph rich notifications: a reference decryptor for an
item's "encryptedContent", following Microsoft's documented steps
(https://learn.microsoft.com/en-us/graph/change-notifications-with-resource-data), and
self-signed encryption certificates for tests.

  decrypt(encrypted_content, private_keys) -> dict
      encrypted_content: {"data", "dataKey", "dataSignature", "encryptionCertificateId",
      "encryptionCertificateThumbprint"}; private_keys: {certificate id: a private key
      object or its PEM (bytes or str)}.
        1. the private key is picked by encryptionCertificateId (unknown -> error);
        2. dataKey (base64) is unwrapped with RSA-OAEP, SHA-1 and MGF1-SHA-1 (a
           32-byte AES key, else error);
        3. HMAC-SHA256(key, base64-decoded data) is compared, in constant time, with
           dataSignature (base64) BEFORE anything is decrypted (mismatch -> error);
        4. data is decrypted with AES-256-CBC, IV = key[:16], PKCS7 unpadding;
        5. the result is UTF-8 JSON (an object).
      Every failure raises DecryptError with a message saying which step failed.

  new_device_certificate(bits=2048, days=365, not_before=None, not_after=None,
                         key_type="rsa") -> (private_key_pem, certificate_pem, certificate_der)
      A self-signed X.509 certificate (CN=ens-device) with a fresh key: RSA of `bits`, or
      key_type "ec" (P-256, bits ignored). Valid from not_before (default 5 minutes ago)
      until not_after (default not_before + days), so tests can make expired, EC or
      1024-bit ones too. base64(certificate_der) is Graph's encryptionCertificate.

  thumbprint(certificate_der) -> uppercase hex SHA-1 (Graph's
      encryptionCertificateThumbprint).

CLI:
  graph_decrypt.py --key ID=key.pem [--key ...] < encryptedContent.json
      Reads an encryptedContent object (or a notification item holding one) on stdin
      and prints the decrypted JSON; exit status 1 with the error on stderr.
  graph_decrypt.py --new-certificate KEY.pem CERT.pem [--bits N] [--days N] [--ec]
      Writes a new key (mode 0600) and certificate (PEM); prints
      {"encryptionCertificate", "encryptionCertificateThumbprint"}.

Python 3 standard library plus `cryptography`; nothing else.
"""
import argparse
import base64
import binascii
import datetime
import hashlib
import hmac
import json
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, padding as sym_padding, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.x509.oid import NameOID

FIELDS = ("data", "dataKey", "dataSignature", "encryptionCertificateId")


class DecryptError(Exception):
    """Any failure to decrypt an encryptedContent; the message names the step."""


def _b64(value, name):
    if not isinstance(value, str) or not value:
        raise DecryptError(f"{name} is missing or not a string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise DecryptError(f"{name} is not valid base64") from None


def _private_key(value, cert_id):
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, (bytes, bytearray)):
        try:
            value = serialization.load_pem_private_key(bytes(value), password=None)
        except (ValueError, TypeError) as e:
            raise DecryptError(f"the private key for '{cert_id}' is not a usable PEM key: "
                               f"{e}") from None
    if not isinstance(value, rsa.RSAPrivateKey):
        raise DecryptError(f"the private key for '{cert_id}' is not an RSA key")
    return value


def decrypt(encrypted_content, private_keys):
    """-> the decrypted resource data (a dict); raises DecryptError."""
    if not isinstance(encrypted_content, dict):
        raise DecryptError("encryptedContent is not an object")
    for name in FIELDS:
        if not isinstance(encrypted_content.get(name), str):
            raise DecryptError(f"encryptedContent.{name} is missing or not a string")
    cert_id = encrypted_content["encryptionCertificateId"]
    if cert_id not in private_keys:
        raise DecryptError(f"no private key for encryptionCertificateId '{cert_id}'")
    key = _private_key(private_keys[cert_id], cert_id)
    wrapped = _b64(encrypted_content["dataKey"], "dataKey")
    data = _b64(encrypted_content["data"], "data")
    signature = _b64(encrypted_content["dataSignature"], "dataSignature")
    try:
        symmetric = key.decrypt(wrapped, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()),
                                                      algorithm=hashes.SHA1(), label=None))
    except ValueError:
        raise DecryptError("dataKey does not decrypt with RSA-OAEP-SHA1 and the key for "
                           f"'{cert_id}'") from None
    if len(symmetric) != 32:
        raise DecryptError(f"the unwrapped key has {len(symmetric)} bytes, not 32")
    expected = hmac.new(symmetric, data, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise DecryptError("dataSignature does not match HMAC-SHA256 of data: not decrypted")
    if not data or len(data) % 16:
        raise DecryptError("data is not a whole number of AES blocks")
    decryptor = Cipher(algorithms.AES(symmetric), modes.CBC(symmetric[:16])).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = sym_padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise DecryptError("data has bad PKCS7 padding") from None
    try:
        out = json.loads(plain.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DecryptError("the decrypted data is not UTF-8 JSON") from None
    if not isinstance(out, dict):
        raise DecryptError("the decrypted data is not a JSON object")
    return out


def thumbprint(certificate_der):
    return hashlib.sha1(certificate_der).hexdigest().upper()


def new_device_certificate(bits=2048, days=365, not_before=None, not_after=None,
                           key_type="rsa"):
    """-> (private_key_pem, certificate_pem, certificate_der)."""
    if key_type == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    elif key_type == "ec":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError("key_type must be 'rsa' or 'ec'")
    start = not_before or (datetime.datetime.now(datetime.timezone.utc)
                           - datetime.timedelta(minutes=5))
    end = not_after or (start + datetime.timedelta(days=days))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ens-device")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return (key_pem, cert.public_bytes(serialization.Encoding.PEM),
            cert.public_bytes(serialization.Encoding.DER))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--key", action="append", default=[], metavar="ID=KEY.pem")
    p.add_argument("--new-certificate", nargs=2, metavar=("KEY.pem", "CERT.pem"))
    p.add_argument("--bits", type=int, default=2048)
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--ec", action="store_true", help="a P-256 key instead of RSA")
    args = p.parse_args(argv)
    if args.new_certificate:
        key_pem, cert_pem, der = new_device_certificate(
            bits=args.bits, days=args.days, key_type="ec" if args.ec else "rsa")
        key_path, cert_path = args.new_certificate
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # also when the file existed
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        with open(cert_path, "wb") as f:
            f.write(cert_pem)
        print(json.dumps({"encryptionCertificate": base64.b64encode(der).decode(),
                          "encryptionCertificateThumbprint": thumbprint(der)}))
        return 0
    if not args.key:
        p.error("give --key ID=KEY.pem (repeatable) or --new-certificate")
    keys = {}
    for spec in args.key:
        cert_id, sep, path = spec.partition("=")
        if not sep or not cert_id or not path:
            p.error(f"--key wants ID=KEY.pem, got {spec!r}")
        with open(path, "rb") as f:
            keys[cert_id] = f.read()
    try:
        obj = json.load(sys.stdin)
    except ValueError as e:
        sys.stderr.write(f"graph_decrypt: stdin is not JSON: {e}\n")
        return 1
    if isinstance(obj, dict) and isinstance(obj.get("encryptedContent"), dict):
        obj = obj["encryptedContent"]
    try:
        out = decrypt(obj, keys)
    except DecryptError as e:
        sys.stderr.write(f"graph_decrypt: {e}\n")
        return 1
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
