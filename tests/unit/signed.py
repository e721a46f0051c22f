"""A signed command's pieces that the unit tests of signatures and of authority share."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.contract.codec import encode_command
from engine.contract.messages import Command, Payload, SubmitJob

TOPIC = "acme.commands"


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def command(tenant: str = "acme") -> bytes:
    body = SubmitJob("email.send", Payload(b"{}", "application/json", ""), 5, None, None, None, None, {}, None)
    return encode_command(Command("cmd-1", "job-1", tenant, 1_700_000_000_000_000, body))
