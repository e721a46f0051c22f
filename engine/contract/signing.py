"""Command signatures: the source of truth for which bytes a tenant signs and how a signature is checked.

A service proves a command's tenant by signing the command record with the tenant's Ed25519
private key; the engine checks the signature against the tenant's public keys in the tenants
table. The signature travels in the record header ``epochq-signature`` (64 raw bytes) and covers

    b"epochq-command-v1" 0x00 <topic, UTF-8> 0x00 <the record value, as produced>

The value is the whole single-object Avro command (command id, job id, tenant, issue time,
body), so no field can be changed without breaking the signature; the topic binds it to one
namespace. docs/contract.md gives the same rule for other languages.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engine.errors import ValidationError

SIGNATURE_HEADER = "epochq-signature"
CONTEXT = b"epochq-command-v1\x00"
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
MAX_KEYS = 2


def signed_bytes(topic: str, value: bytes) -> bytes:
    """The bytes a signature of the command record ``value`` on ``topic`` covers."""
    return CONTEXT + topic.encode() + b"\x00" + value


def sign(key: Ed25519PrivateKey, topic: str, value: bytes) -> bytes:
    """The 64-byte signature of a command record."""
    return key.sign(signed_bytes(topic, value))


def verifies(public_keys: Sequence[bytes], topic: str, value: bytes, signature: bytes | None) -> bool:
    """Decide whether ``signature`` is one of ``public_keys``' over the command record."""
    if signature is None or len(signature) != SIGNATURE_BYTES:
        return False
    message = signed_bytes(topic, value)
    for raw in public_keys:
        try:
            _public_key(raw).verify(signature, message)
            return True
        except (InvalidSignature, ValueError):
            continue
    return False


@functools.lru_cache(maxsize=4096)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    """A loaded key, once per key: loading costs as much as a verification."""
    return Ed25519PublicKey.from_public_bytes(raw)


class Signer(StrEnum):
    """Who signed a command, hence what it may do (``engine.domain.authority``)."""

    UNSIGNED = "unsigned"  # no signature (accepted only when signatures are not required): as before, dev mode
    TENANT = "tenant"  # a key of the command's tenant: that tenant's powers only
    OPERATOR = "operator"  # an operator key (``operator_public_key_file``): every power, for any tenant
    ENGINE = "engine"  # the engines' key: what engines send themselves (children, occurrences, reports)
    POOL = "pool"  # a key of a remote worker pool (``pool_public_keys_dir``): results of that pool's attempts only


@dataclass(frozen=True, slots=True)
class Proof:
    """What a command's signature proves: a refusal (why it proves nothing), or who signed it."""

    refusal: str | None = None
    signer: Signer = Signer.UNSIGNED
    reason: str = "unauthenticated"  # the refusal's code: unauthenticated, or unauthorized (a power it lacks)

    @property
    def by_engine(self) -> bool:
        """Whether the engines signed it (good for any tenant, across tenants)."""
        return self.signer is Signer.ENGINE


TENANT_SIGNED = Proof(signer=Signer.TENANT)
OPERATORS_ONLY = "pause/resume/limits are operator commands"
"""A task type's command names no tenant (it holds every tenant's jobs): only an operator's or the engines' key
proves it (docs/security.md, *Who may do what*)."""
OPERATOR_KEY_HINT = "only an operator key may (EPOCHQ_OPERATOR_KEY_FILE; docs/security.md)"


def authenticate(tenant: str, topic: str, value: bytes, signature: bytes | None, tenant_keys: Sequence[bytes],
                 engine_keys: Sequence[bytes], required: bool, internal: bool = False,
                 operator_keys: Sequence[bytes] = (), operators_only: bool = False, result: bool = False,
                 pool_keys: Mapping[str, Sequence[bytes]] | None = None, pool: str | None = None) -> Proof:
    """Decide whether a command record proves its tenant, and who signed it.

    A signature by the engines' key (commands the engines send themselves: fan-out children,
    schedule occurrences, reports to a parent) is good for any tenant, and so is an operator's
    (not for ``internal`` commands). Otherwise the signature must be by one of the tenant's keys.
    A signature that verifies against none is refused even when signatures are not required; an
    unsigned command is refused only when they are.
    ``internal``: a command only engines send (a report to a parent job or a schedule); when
    signatures are required it must be the engines'.
    ``operators_only``: a command on a task type as a whole (pause, resume, rate limits), which names no tenant:
    a refusal says that only an operator may sign it (not that the key is not one of tenant ''s keys).
    ``result``: a remote worker's result (``ReportAttempt``): a key of ``pool`` (the pool the attempt was dispatched
    to, ``pool_keys``: each pool's public keys), an operator's or the engines' proves it; another pool's key never
    does (a worker reports the attempts of its own pool only), nor a tenant's (a tenant would report its own jobs'
    outcomes); unsigned, it passes only when signatures are not required (:func:`result_proof`).
    """
    if result:
        return result_proof(topic, value, signature, required, pool, pool_keys or {}, operator_keys, engine_keys,
                            tenant_keys)
    if signature is not None and not internal and verifies(tenant_keys, topic, value, signature):
        return TENANT_SIGNED  # the common case first: one verification
    if verifies(engine_keys, topic, value, signature):
        return Proof(signer=Signer.ENGINE)
    if not internal and verifies(operator_keys, topic, value, signature):
        return Proof(signer=Signer.OPERATOR)
    if verifies(tenant_keys, topic, value, signature):
        return Proof("only engines send this command") if required else Proof()
    if signature is not None and operators_only:
        return Proof(f"{OPERATORS_ONLY}; a tenant's key may not sign them, {OPERATOR_KEY_HINT}")
    if signature is not None and not tenant:
        return Proof("the command names no tenant, so a tenant's key proves nothing: name the tenant (--tenant, the "
                     "schedule's or the job's) or sign with an operator key (EPOCHQ_OPERATOR_KEY_FILE; "
                     "docs/security.md)")
    if signature is not None:
        return Proof(f"the signature is not by a key of tenant {tenant!r}")
    if not required:
        return Proof()
    if operators_only:
        return Proof(f"{OPERATORS_ONLY} and signatures are required: this one is unsigned; {OPERATOR_KEY_HINT}")
    if not tenant_keys:
        return Proof(f"signatures are required and tenant {tenant!r} has no public key "
                     "(epochq tenants set --public-key)")
    return Proof(f"signatures are required and the command has no {SIGNATURE_HEADER} header")


RESULT_KEY_HINT = ("a worker signs results with its pool's key (EPOCHQ_WORKER_KEY_FILE; the engines' "
                   "EPOCHQ_POOL_PUBLIC_KEYS_DIR holds <pool>.pem) or an operator key (EPOCHQ_OPERATOR_KEY_FILE); "
                   "docs/security.md")
RESULT = "a worker's result (ReportAttempt)"


def result_proof(topic: str, value: bytes, signature: bytes | None, required: bool, pool: str | None,
                 pool_keys: Mapping[str, Sequence[bytes]], operator_keys: Sequence[bytes] = (),
                 engine_keys: Sequence[bytes] = (), tenant_keys: Sequence[bytes] = ()) -> Proof:
    """Decide whether a remote worker's result proves it may report the attempt, dispatched to ``pool`` (None: to no
    pool, it runs in an engine's process or not at all). A key of ``pool`` does (checked first: the common case is
    one verification), and so do an operator's and the engines'. A key of another pool is refused as
    ``unauthorized`` (it proves a worker, of the wrong pool), a tenant's or none as ``unauthenticated``; an unsigned
    result passes only when signatures are not required."""
    if signature is None:
        return Proof() if not required else Proof(
            f"{RESULT} and signatures are required: this one is unsigned; {RESULT_KEY_HINT}")
    if pool is not None and verifies(pool_keys.get(pool, ()), topic, value, signature):
        return Proof(signer=Signer.POOL)
    if verifies(operator_keys, topic, value, signature):
        return Proof(signer=Signer.OPERATOR)
    if verifies(engine_keys, topic, value, signature):
        return Proof(signer=Signer.ENGINE)
    other = next((name for name, keys in sorted(pool_keys.items())
                  if name != pool and verifies(keys, topic, value, signature)), None)
    if other is not None:
        where = f"pool {pool!r}" if pool is not None else "no pool (it runs in an engine's process, or not at all)"
        return Proof(f"{RESULT} signed with pool {other!r}'s key for an attempt dispatched to {where}: a pool's key "
                     "signs the results of its own pool's attempts only", Signer.POOL, "unauthorized")
    if verifies(tenant_keys, topic, value, signature):
        return Proof(f"{RESULT} signed with a tenant's key: a tenant's key may not sign results; {RESULT_KEY_HINT}")
    whose = f"pool {pool!r}'s" if pool is not None else "a pool's"
    return Proof(f"{RESULT} whose signature is by no key of {whose} nor an operator's; {RESULT_KEY_HINT}")


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM (PKCS#8) file, as ``openssl genpkey -algorithm ed25519`` writes."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), None)
    except (OSError, ValueError, TypeError) as e:
        raise ValidationError(f"signing_key_file: cannot load {path}: {e}", "signing_key_file") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValidationError(f"signing_key_file: {path} is not an Ed25519 key", "signing_key_file")
    return key


def load_public_key(path: Path) -> bytes:
    """The 32 raw bytes of an Ed25519 public key from a PEM file (or of a private key's public half)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValidationError(f"public_key: cannot load {path}: {e}", "public_key") from None
    return public_key_of(data, str(path))


def public_key_of(data: bytes, source: str = "the PEM data") -> bytes:
    """The 32 raw bytes of the Ed25519 public key in PEM ``data`` (or of a private key's public half)."""
    try:
        key = (serialization.load_pem_private_key(data, None).public_key() if b"PRIVATE KEY" in data
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as e:
        raise ValidationError(f"public_key: cannot load {source}: {e}", "public_key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValidationError(f"public_key: {source} is not an Ed25519 key", "public_key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def check_public_keys(keys: Sequence[bytes]) -> tuple[bytes, ...]:
    """The keys as a tuple; ValidationError unless each is 32 bytes and there are at most 2."""
    if len(keys) > MAX_KEYS:
        raise ValidationError(f"public_keys: at most {MAX_KEYS} (the current and the next), got {len(keys)}")
    for key in keys:
        if len(key) != PUBLIC_KEY_BYTES:
            raise ValidationError(f"public_keys: an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes, got {len(key)}")
    return tuple(keys)
