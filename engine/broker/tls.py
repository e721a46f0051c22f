"""The local broker's small certificate authority: the source of truth for who the broker is over TLS.

A fresh CA is made on every secure start; it signs one certificate for the broker (valid for
``127.0.0.1`` and ``localhost``) and one client certificate per user (subject ``CN=<user>``,
for the mTLS listener). The CA's private key is never written: nothing else is ever signed
with it. Files are PEM, which Kafka reads directly (``ssl.keystore.type=PEM``). The
broker's key is unencrypted PKCS#8 in a file only its owner can read: Java 17 cannot open a
PBES2-encrypted key, and a password stored beside the key would guard nothing.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["BROKER_CN", "TlsFiles", "make_tls_files"]

BROKER_CN = "epochq-local-broker"
VALID_DAYS = 365
_ONE_DAY = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the CA certificate, the broker's key store (key and chain) and the users' certificates are."""

    ca_file: Path
    keystore_file: Path
    clients: Mapping[str, tuple[Path, Path]]
    """user → (certificate, private key), PEM."""


def make_tls_files(directory: Path, users: Sequence[str] = ()) -> TlsFiles:
    """Make a CA, a broker certificate and a client certificate per user, all signed by the CA.

    Writes ``ca.pem``, ``broker-keystore.pem`` and ``users/<user>.crt`` / ``.key`` (keys mode 0600).
    """
    (directory / "users").mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cert = _signed(broker_key, BROKER_CN, ca_key, ca_cert, server=True)
    clients = {user: _client_files(directory / "users", user, ca_key, ca_cert) for user in users}
    files = TlsFiles(directory / "ca.pem", directory / "broker-keystore.pem", clients)
    files.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.keystore_file, _keystore_pem(broker_key, [broker_cert, ca_cert]))
    return files


def _client_files(directory: Path, user: str, ca_key: ec.EllipticCurvePrivateKey,
                  ca_cert: x509.Certificate) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert_path, key_path = directory / f"{user}.crt", directory / f"{user}.key"
    cert = _signed(key, user, ca_key, ca_cert, server=False)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return cert_path, key_path


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "epochq local CA")])
    return (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )


def _signed(key: ec.EllipticCurvePrivateKey, common_name: str, ca_key: ec.EllipticCurvePrivateKey,
            ca_cert: x509.Certificate, server: bool) -> x509.Certificate:
    """A certificate for ``CN=common_name``: the broker's (server and client, for 127.0.0.1/localhost)
    or a user's (client only)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        _builder(name, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY)
        .not_valid_after(now + VALID_DAYS * _ONE_DAY)
    )


def _keystore_pem(key: ec.EllipticCurvePrivateKey, chain: list[x509.Certificate]) -> bytes:
    """A PKCS#8 key followed by its certificate chain: Kafka's PEM key store."""
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
