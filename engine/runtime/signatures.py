"""Command signatures at run time: who signs (a client with its tenant's key, an engine with the
engines' key) and the check every engine applies to the commands it admits.

The rule itself (the bytes signed, when a command is refused) is :mod:`engine.contract.signing`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.app import POOL_NAME
from engine.config import Settings
from engine.contract import messages as m
from engine.domain.authority import OPERATOR_COMMANDS
from engine.domain.commands import Sender, sent_by
from engine.contract.signing import (
    SIGNATURE_HEADER, Proof, authenticate, check_public_keys, load_private_key, public_key_of, result_proof, sign,
)
from engine.errors import ConfigError, ValidationError

Headers = list[tuple[str, str | bytes | None]]
PEM_END = b"-----END PUBLIC KEY-----"


class CommandSigner:
    """Signs command records for one commands topic with one private key."""

    def __init__(self, key: Ed25519PrivateKey, topic: str):
        self._key, self.topic = key, topic
        self.public_key = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def headers(self, value: bytes) -> Headers:
        """The record headers that carry the signature of ``value``."""
        return [(SIGNATURE_HEADER, sign(self._key, self.topic, value))]


def client_signer(settings: Settings) -> CommandSigner | None:
    """The signer of a client's commands: an operator's key (``operator_key_file``) if it has one, else its
    tenant's (``signing_key_file``), else none."""
    if settings.operator_key_file is not None:
        return CommandSigner(_load(settings.operator_key_file, "operator_key_file"), settings.commands_topic)
    if settings.signing_key_file is None:
        return None
    return CommandSigner(_load(settings.signing_key_file, "signing_key_file"), settings.commands_topic)


def worker_signer(settings: Settings) -> CommandSigner | None:
    """The signer of a remote worker's results: its pool's key (``worker_key_file``), else an operator's
    (``operator_key_file``), never a tenant's (the engines refuse a result a tenant's key signed); none without
    either, which a namespace that requires signatures refuses at start."""
    if settings.worker_key_file is not None:
        return CommandSigner(_load(settings.worker_key_file, "worker_key_file"), settings.commands_topic)
    if settings.operator_key_file is not None:
        return CommandSigner(_load(settings.operator_key_file, "operator_key_file"), settings.commands_topic)
    if settings.require_signatures:
        raise ConfigError("worker_key_file (EPOCHQ_WORKER_KEY_FILE): required with require_signatures, to sign "
                          "a worker's results with its pool's key (docs/security.md)")
    return None


def operator_keys(settings: Settings) -> tuple[bytes, ...]:
    """The operators' public keys the engines accept (``operator_public_key_file``: one PEM key, or two while
    rotating); none without the setting."""
    path = settings.operator_public_key_file
    if path is None:
        return ()
    return _pem_keys(path, "operator_public_key_file (EPOCHQ_OPERATOR_PUBLIC_KEY_FILE)")


def pool_keys(settings: Settings) -> dict[str, tuple[bytes, ...]]:
    """Each remote pool's public keys the engines accept for its results (``pool_public_keys_dir``: ``<pool>.pem``
    per pool, one PEM key, or two while rotating); none without the setting."""
    folder = settings.pool_public_keys_dir
    if folder is None:
        return {}
    where = "pool_public_keys_dir (EPOCHQ_POOL_PUBLIC_KEYS_DIR)"
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".pem")
    except OSError as e:
        raise ConfigError(f"{where}: {folder}: {e.strerror or e}") from None
    keys = {}
    for path in files:
        if not POOL_NAME.match(path.stem):
            raise ConfigError(f"{where}: {path.name}: a pool's file is <pool>.pem (a pool: 1-100 letters, digits, "
                              "'_' or '-')")
        keys[path.stem] = _pem_keys(path, where)
    return keys


def _pem_keys(path: Path, where: str) -> tuple[bytes, ...]:
    """The public keys in a PEM file (one, or two while rotating); ConfigError naming ``where`` and the file."""
    try:
        blocks = [b for b in path.read_bytes().split(PEM_END) if b.strip()]
        return check_public_keys([public_key_of(block + PEM_END) for block in blocks])
    except (OSError, ValidationError) as e:
        raise ConfigError(f"{where}: {path}: "
                          f"{str(e).split(': ', 1)[-1] if isinstance(e, ValidationError) else e}") from None


def engine_signer(settings: Settings) -> CommandSigner | None:
    """The signer of the commands engines send themselves (``engine_key_file``).

    Required when the namespace requires signatures: otherwise the engines' own commands
    (fan-out children, schedule occurrences) would be refused.
    """
    if settings.engine_key_file is None:
        if settings.require_signatures:
            raise ConfigError("engine_key_file (EPOCHQ_ENGINE_KEY_FILE): required with require_signatures, "
                              "to sign the commands engines send themselves (docs/security.md)")
        return None
    return CommandSigner(_load(settings.engine_key_file, "engine_key_file"), settings.commands_topic)


def _load(path: Any, field: str) -> Ed25519PrivateKey:
    try:
        return load_private_key(path)
    except ValidationError as e:
        raise ConfigError(f"{field}: {str(e).split(': ', 1)[-1]}") from None


def signature_of(headers: Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None
                 ) -> bytes | None:
    """The signature header's value among a record's headers (as a consumer returns them), if there is one."""
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in pairs:
        if name == SIGNATURE_HEADER:
            return value if isinstance(value, bytes) else None
    return None


INTERNAL_COMMANDS = sent_by(Sender.ENGINE)
"""Commands only engines send: a child's end reported to its scoped parent, an occurrence's to its schedule,
a job's wait for a dependency and the dependency's end reported to it."""


class CommandChecker:
    """What an admitted command's signature proves (see ``engine.contract.signing.authenticate``)."""

    def __init__(self, settings: Settings, tenant_keys: Callable[[str], tuple[bytes, ...]],
                 engine: CommandSigner | None):
        self.topic, self.required = settings.commands_topic, settings.require_signatures
        self._tenant_keys = tenant_keys
        self._engine_keys = (engine.public_key,) if engine is not None else ()
        self._operator_keys = operator_keys(settings)
        self._pool_keys = pool_keys(settings)

    def __call__(self, command: m.Command, raw: bytes, signature: bytes | None, pool: str | None = None) -> Proof:
        """What ``command`` (``raw``, signed with ``signature``) proves; ``pool``: for a worker's result, the pool
        the attempt it reports was dispatched to (None: to none)."""
        if isinstance(command.body, m.ReportAttempt):
            return result_proof(self.topic, raw, signature, self.required, pool, self._pool_keys,
                                self._operator_keys, self._engine_keys, self._tenant_keys(command.tenant_id))
        internal = isinstance(command.body, INTERNAL_COMMANDS)
        return authenticate(command.tenant_id, self.topic, raw, signature, self._tenant_keys(command.tenant_id),
                            self._engine_keys, self.required, internal, self._operator_keys,
                            isinstance(command.body, OPERATOR_COMMANDS))
