"""Command signatures: the bytes signed, who may sign for a tenant, and when an unsigned command passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.config import load_settings
from engine.contract.codec import decode_tenant, encode_tenant
from engine.contract.messages import TenantConfig
from engine.contract.signing import SIGNATURE_HEADER, authenticate, load_private_key, load_public_key, sign, \
    signed_bytes, verifies
from engine.errors import ConfigError, ValidationError
from engine.runtime.signatures import CommandChecker, client_signer, engine_signer, signature_of
from engine.runtime.tenants import tenant_config
from tests.unit.signed import TOPIC, command, raw

def test_the_signature_covers_a_context_the_topic_and_the_whole_record() -> None:
    key, value = Ed25519PrivateKey.generate(), command()
    assert signed_bytes(TOPIC, value) == b"epochq-command-v1\x00acme.commands\x00" + value
    signature = sign(key, TOPIC, value)
    assert len(signature) == 64 and verifies([raw(key)], TOPIC, value, signature)
    assert not verifies([raw(key)], "other.commands", value, signature)  # another namespace
    assert not verifies([raw(key)], TOPIC, command("globex"), signature)  # another tenant in the record
    assert not verifies([raw(Ed25519PrivateKey.generate())], TOPIC, value, signature)
    assert not verifies([raw(key)], TOPIC, value, None) and not verifies([raw(key)], TOPIC, value, b"short")


def test_who_may_prove_a_tenant() -> None:
    acme, globex, engine = (Ed25519PrivateKey.generate() for _ in range(3))
    value = command("acme")

    def check(signature: bytes | None, required: bool = True, keys: list[bytes] | None = None,
              internal: bool = False) -> str | None:
        return authenticate("acme", TOPIC, value, signature, [raw(acme)] if keys is None else keys, [raw(engine)],
                            required, internal).refusal

    assert check(sign(acme, TOPIC, value)) is None
    assert check(sign(engine, TOPIC, value)) is None  # the engines' own commands, for any tenant
    assert authenticate("acme", TOPIC, value, sign(engine, TOPIC, value), [], [raw(engine)], True).by_engine
    assert not authenticate("acme", TOPIC, value, sign(acme, TOPIC, value), [raw(acme)], [], True).by_engine
    assert check(sign(acme, TOPIC, value), internal=True) == "only engines send this command"
    assert check(sign(acme, TOPIC, value), required=False, internal=True) is None
    assert "not by a key of tenant 'acme'" in str(check(sign(globex, TOPIC, value)))
    assert "not by a key" in str(check(sign(globex, TOPIC, value), required=False))  # a wrong one never passes
    assert "no epochq-signature header" in str(check(None))
    assert check(None, required=False) is None
    assert "has no public key" in str(check(None, keys=[]))


def test_a_task_types_command_signed_by_a_tenant_is_refused_as_an_operators_command() -> None:
    acme, operator = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    value = command("")  # pause, resume and limits name no tenant

    def proof(signature: bytes | None, required: bool = True):  # type: ignore[no-untyped-def]
        return authenticate("", TOPIC, value, signature, [], [], required, operator_keys=[raw(operator)],
                            operators_only=True)

    refused = proof(sign(acme, TOPIC, value))
    assert refused.reason == "unauthenticated" and refused.refusal == (
        "pause/resume/limits are operator commands; a tenant's key may not sign them, only an operator key may "
        "(EPOCHQ_OPERATOR_KEY_FILE; docs/security.md)")
    assert "tenant ''" not in str(proof(sign(acme, TOPIC, value), required=False).refusal)
    assert str(proof(None).refusal).startswith("pause/resume/limits are operator commands and signatures are "
                                                "required: this one is unsigned; only an operator key may")
    assert proof(None, required=False).refusal is None
    assert proof(sign(operator, TOPIC, value)).refusal is None


def test_a_workers_result_is_proved_by_an_operator_key_never_by_a_tenants() -> None:
    acme, operator, engine = (Ed25519PrivateKey.generate() for _ in range(3))
    value = command("acme")  # a ReportAttempt names the job's tenant

    def proof(signature: bytes | None, required: bool = True):  # type: ignore[no-untyped-def]
        return authenticate("acme", TOPIC, value, signature, [raw(acme)], [raw(engine)], required,
                            operator_keys=[raw(operator)], result=True)

    for required in (True, False):
        tenant_signed = proof(sign(acme, TOPIC, value), required)
        assert tenant_signed.reason == "unauthenticated" and tenant_signed.refusal == (
            "a worker's result (ReportAttempt) signed with a tenant's key: a tenant's key may not sign results; "
            "a worker signs results with an operator key (EPOCHQ_OPERATOR_KEY_FILE; docs/security.md)")
        assert proof(sign(operator, TOPIC, value), required).refusal is None
        assert "by no operator key" in str(proof(sign(Ed25519PrivateKey.generate(), TOPIC, value), required).refusal)
    assert str(proof(None).refusal).startswith("a worker's result (ReportAttempt) and signatures are required: this "
                                               "one is unsigned; a worker signs results with an operator key")
    assert proof(None, required=False).refusal is None
    assert proof(sign(engine, TOPIC, value)).by_engine


def test_a_worker_signs_with_an_operator_key_only(tmp_path: Path) -> None:
    from engine.runtime.signatures import worker_signer

    operator, tenant = tmp_path / "operator.pem", tmp_path / "tenant.pem"
    for path in (operator, tenant):
        path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    base = load_settings(namespace="acme", signing_key_file=tenant)
    assert worker_signer(base) is None  # a tenant's key would be refused: it signs nothing
    signer = worker_signer(base.model_copy(update={"operator_key_file": operator}))
    assert signer is not None and signer.public_key == raw(load_private_key(operator))
    with pytest.raises(ConfigError, match="operator_key_file .* required with require_signatures"):
        worker_signer(base.model_copy(update={"require_signatures": True}))


def test_tenant_keys_travel_in_the_tenants_table(tmp_path: Path) -> None:
    current, upcoming = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    config = tenant_config("acme", 1.0, public_keys=[raw(current), raw(upcoming)])
    assert decode_tenant(encode_tenant(config)).public_keys == (raw(current), raw(upcoming))
    assert TenantConfig("old", 1).public_keys == ()
    with pytest.raises(ValidationError, match="at most 2"):
        tenant_config("acme", 1.0, public_keys=[raw(current)] * 3)
    with pytest.raises(ValidationError, match="32 bytes"):
        tenant_config("acme", 1.0, public_keys=[b"x"])


def test_keys_load_from_pem_files_and_clients_and_engines_sign(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    private = tmp_path / "acme.key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public = tmp_path / "acme.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    assert load_public_key(public) == load_public_key(private) == raw(key)
    assert raw(load_private_key(private)) == raw(key)
    settings = load_settings(bootstrap="b:1", namespace="acme", signing_key_file=str(private))
    signer = client_signer(settings)
    assert signer is not None
    headers = signer.headers(command())
    assert headers[0][0] == SIGNATURE_HEADER and signature_of(headers) == headers[0][1]
    checker = CommandChecker(settings.model_copy(update={"require_signatures": True}),
                             lambda tenant: (raw(key),) if tenant == "acme" else (), None)
    from engine.contract.codec import decode_command
    assert checker(decode_command(command()), command(), signature_of(headers)).refusal is None
    assert checker(decode_command(command("globex")), command("globex"), None).refusal is not None


def test_requiring_signatures_needs_the_engines_key_and_a_bad_key_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="engine_key_file"):
        engine_signer(load_settings(bootstrap="b:1", require_signatures="true"))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(ConfigError, match="engine_key_file: cannot load"):
        engine_signer(load_settings(bootstrap="b:1", engine_key_file=str(bad)))


def test_a_command_naming_no_tenant_signed_by_a_tenant_says_to_name_the_tenant() -> None:
    acme = Ed25519PrivateKey.generate()
    value = command("")  # e.g. `epochq schedules pause ID` without --tenant

    refusal = authenticate("", TOPIC, value, sign(acme, TOPIC, value), [], [], True).refusal
    assert refusal is not None and "tenant ''" not in refusal
    assert refusal == ("the command names no tenant, so a tenant's key proves nothing: name the tenant "
                       "(--tenant, the schedule's or the job's) or sign with an operator key "
                       "(EPOCHQ_OPERATOR_KEY_FILE; docs/security.md)")
