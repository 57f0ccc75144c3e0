"""Certificates and TLS contexts: the simulators' server contexts, the context they call
back into ENS with, and the throwaway certificates the simulators and their self-tests
make with `cryptography`."""
import datetime
import ipaddress
import os
import ssl
import threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def server_context(certfile, keyfile, alpn, client_ca=None):
    """A server context for TLS 1.2 or later offering the one ALPN protocol `alpn`; with
    client_ca, clients may present a certificate that CA issued (and are verified if so)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_ca:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(client_ca)
    context.set_alpn_protocols([alpn])
    return context


class CallbackTrust:
    """The client context for calls into ENS, trusting the CA file given on the command
    line; made anew when that file changes (a test stack may renew nginx's certificate
    while the simulator runs). OpenSSL's strict X.509 checks are off: development
    certificates, like ENS's own self-signed one, do not all pass them."""

    def __init__(self, cafile):
        self.cafile = cafile
        self.lock = threading.Lock()
        self.context, self.stamp = None, None

    def get(self):
        try:
            st = os.stat(self.cafile)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        with self.lock:
            if self.context is not None and stamp == self.stamp:
                return self.context
        context = ssl.create_default_context(cafile=self.cafile)
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with self.lock:
            self.context, self.stamp = context, stamp
        return context


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def pem_cert(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def write_file(path, data, private=False):
    """Writes atomically (a simulator starting alongside never reads half a file);
    private files are readable by their owner only."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def make_ca(cn, days=3650):
    """A P-256 CA that may sign certificates and CRLs; -> (key, certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def builder(subject, issuer, public_key, days=1):
    """A certificate builder valid from five minutes ago for `days` (self-tests)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def localhost_san():
    return x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


def write_self_signed(certfile, keyfile, cn="localhost"):
    """A self-signed P-256 certificate for localhost and 127.0.0.1, valid for a day, like
    ENS's development nginx certificate; clients trust it as its own CA. Returns the key."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (builder(cn, cn, key.public_key())
            .add_extension(localhost_san(), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    write_file(certfile, pem_cert(cert))
    write_file(keyfile, pem_key(key), private=True)
    return key
