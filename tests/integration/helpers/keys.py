"""Ed25519 key pairs as PEM files, for the tests of signed commands."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def key_files(tmp: Path, name: str) -> tuple[Path, Path]:
    """A fresh Ed25519 key pair as PEM files (private, public), as `openssl genpkey` would write them."""
    key = Ed25519PrivateKey.generate()
    private, public = tmp / f"{name}.key", tmp / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
