"""Command signatures: the bytes signed, who may sign for a tenant, and when an unsigned command passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.config import load_settings
from engine.contract.codec import decode_tenant, encode_tenant
from engine.contract.messages import TenantConfig
from engine.contract.signing import SIGNATURE_HEADER, Signer, authenticate, load_private_key, load_public_key, \
    result_proof, sign, signed_bytes, verifies
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
            "a worker signs results with its pool's key (EPOCHQ_WORKER_KEY_FILE; the engines' "
            "EPOCHQ_POOL_PUBLIC_KEYS_DIR holds <pool>.pem) or an operator key (EPOCHQ_OPERATOR_KEY_FILE); "
            "docs/security.md")
        assert proof(sign(operator, TOPIC, value), required).refusal is None
        assert "by no key of a pool's nor an operator's" in str(
            proof(sign(Ed25519PrivateKey.generate(), TOPIC, value), required).refusal)
    assert str(proof(None).refusal).startswith("a worker's result (ReportAttempt) and signatures are required: this "
                                               "one is unsigned; a worker signs results with its pool's key")
    assert proof(None, required=False).refusal is None
    assert proof(sign(engine, TOPIC, value)).by_engine


def test_a_pool_s_key_proves_the_results_of_its_own_pool_s_attempts_only() -> None:
    gpu, cpu, gpu_next, operator, acme = (Ed25519PrivateKey.generate() for _ in range(5))
    keys = {"gpu": (raw(gpu), raw(gpu_next)), "cpu": (raw(cpu),)}
    value = command("acme")

    def proof(key: Ed25519PrivateKey | None, pool: str | None, required: bool = True):  # type: ignore[no-untyped-def]
        return result_proof(TOPIC, value, sign(key, TOPIC, value) if key is not None else None, required, pool, keys,
                            [raw(operator)], [], [raw(acme)])

    for required in (True, False):
        assert proof(gpu, "gpu", required).refusal is None and proof(gpu, "gpu").signer is Signer.POOL
        assert proof(gpu_next, "gpu", required).refusal is None  # the next key, while rotating
        assert proof(operator, "gpu", required).refusal is None  # an operator's key, as before pool keys
        other = proof(cpu, "gpu", required)
        assert other.reason == "unauthorized" and other.refusal == (
            "a worker's result (ReportAttempt) signed with pool 'cpu''s key for an attempt dispatched to pool 'gpu': "
            "a pool's key signs the results of its own pool's attempts only")
        nowhere = proof(gpu, None, required)  # no attempt of the job is out with a pool
        assert nowhere.reason == "unauthorized" and "dispatched to no pool" in str(nowhere.refusal)
        assert "by no key of pool 'gpu''s nor an operator's" in str(proof(Ed25519PrivateKey.generate(), "gpu",
                                                                           required).refusal)
        assert "a tenant's key may not sign results" in str(proof(acme, "gpu", required).refusal)
    assert "unsigned" in str(proof(None, "gpu").refusal) and proof(None, "gpu", required=False).refusal is None


def test_a_worker_signs_with_its_pool_s_key_else_an_operator_key_never_a_tenant_s(tmp_path: Path) -> None:
    from engine.runtime.signatures import worker_signer

    operator, tenant, pool = tmp_path / "operator.pem", tmp_path / "tenant.pem", tmp_path / "gpu.key"
    for path in (operator, tenant, pool):
        path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    base = load_settings(namespace="acme", signing_key_file=tenant)
    assert worker_signer(base) is None  # a tenant's key would be refused: it signs nothing
    signer = worker_signer(base.model_copy(update={"operator_key_file": operator}))
    assert signer is not None and signer.public_key == raw(load_private_key(operator))
    signer = worker_signer(base.model_copy(update={"operator_key_file": operator, "worker_key_file": pool}))
    assert signer is not None and signer.public_key == raw(load_private_key(pool))
    with pytest.raises(ConfigError, match="worker_key_file .* required with require_signatures"):
        worker_signer(base.model_copy(update={"require_signatures": True}))


def test_the_engines_read_each_pool_s_public_keys_from_a_directory_of_pem_files(tmp_path: Path) -> None:
    from engine.runtime.signatures import pool_keys

    gpu, gpu_next, cpu = (Ed25519PrivateKey.generate() for _ in range(3))
    pem = [k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
           for k in (gpu, gpu_next, cpu)]
    (tmp_path / "gpu.pem").write_bytes(pem[0] + pem[1])
    (tmp_path / "cpu.pem").write_bytes(pem[2])
    (tmp_path / "README").write_text("not a key file: ignored")
    settings = load_settings(namespace="acme", pool_public_keys_dir=str(tmp_path))
    assert pool_keys(settings) == {"gpu": (raw(gpu), raw(gpu_next)), "cpu": (raw(cpu),)}
    assert pool_keys(load_settings(namespace="acme")) == {}
    (tmp_path / "bad pool.pem").write_bytes(pem[0])
    with pytest.raises(ConfigError, match=r"pool_public_keys_dir .*: bad pool.pem: a pool's file is <pool>.pem"):
        pool_keys(settings)
    (tmp_path / "bad pool.pem").unlink()
    (tmp_path / "cpu.pem").write_text("garbage")
    with pytest.raises(ConfigError, match=r"pool_public_keys_dir \(EPOCHQ_POOL_PUBLIC_KEYS_DIR\): .*cpu.pem"):
        pool_keys(settings)
    with pytest.raises(ConfigError, match="pool_public_keys_dir .*: No such file"):
        pool_keys(load_settings(namespace="acme", pool_public_keys_dir=str(tmp_path / "missing")))


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
