"""Security settings, the ACL rules of the roles, and the secure broker's files (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from engine.broker.config import NodeSpec, node_settings
from engine.broker.secure import USERS, make_secure_setup, server_settings
from engine.config import load_settings
from engine.errors import ConfigError, ValidationError
from engine.runtime.acls import AclRule, principal, wanted_acls

SECRET = "s3cr3t-never-shown"


def test_sasl_ssl_settings_from_the_environment_reach_every_client_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"BOOTSTRAP": "10.0.0.1:9093", "SECURITY_PROTOCOL": "SASL_SSL", "SASL_USERNAME": "engine",
                       "SASL_PASSWORD": SECRET, "SSL_CA_FILE": "/etc/kafka/ca.pem"}.items():
        monkeypatch.setenv(f"EPOCHQ_{key}", value)
    settings = load_settings()
    assert security_of(settings.kafka_config()) == {
        "bootstrap.servers": "10.0.0.1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "engine", "sasl.password": SECRET, "ssl.ca.location": "/etc/kafka/ca.pem"}
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())
    assert settings.security_summary() == "SASL_SSL SCRAM-SHA-512 as engine"


def test_mtls_settings_give_the_client_certificate_and_key() -> None:
    settings = load_settings(bootstrap="b:9094", security_protocol="SSL", ssl_ca_file="/ca.pem",
                             ssl_cert_file="/svc.pem", ssl_key_file="/svc.key", ssl_key_password=SECRET)
    conf = settings.kafka_config()
    assert conf["security.protocol"] == "SSL" and "sasl.username" not in conf
    assert (conf["ssl.certificate.location"], conf["ssl.key.location"], conf["ssl.key.password"]) == (
        "/svc.pem", "/svc.key", SECRET)


def test_plaintext_stays_the_default() -> None:
    assert security_of(load_settings(bootstrap="b:9092").kafka_config()) == {"bootstrap.servers": "b:9092",
                                                                             "security.protocol": "PLAINTEXT"}


def security_of(conf: dict[str, object]) -> dict[str, object]:
    """A client configuration without its log and error callbacks (engine/clientlogs.py)."""
    return {key: value for key, value in conf.items() if key not in ("logger", "error_cb")}


@pytest.mark.parametrize("overrides, says", [
    ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "needs sasl_username and sasl_password"),
    ({"sasl_username": "u", "sasl_password": SECRET}, "need security_protocol SASL_SSL"),
    ({"security_protocol": "SSL", "ssl_cert_file": "/c.pem"}, "go together"),
    ({"ssl_ca_file": "/ca.pem"}, "need security_protocol SSL or SASL_SSL"),
    ({"security_protocol": "TLS"}, "security_protocol"),
])
def test_incomplete_security_settings_are_refused_without_showing_a_password(overrides: dict[str, str],
                                                                             says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        load_settings(bootstrap="b:9092", **overrides)
    assert SECRET not in str(refused.value)


def test_roles_get_what_the_design_needs_and_only_engines_write_events() -> None:
    rules = wanted_acls("acme", ["engine"], ["billing", "User:CN=mailer"], ["auditor"])
    writers = {r.principal for r in rules if r.name == "acme.events" and r.operation == "WRITE"}
    assert writers == {"User:engine"}
    service = {(r.resource_type, r.name, r.operation) for r in rules if r.principal == "User:billing"}
    assert service == {("TOPIC", "acme.commands", "WRITE"), ("TOPIC", "acme.commands", "DESCRIBE"),
                       ("TOPIC", "acme.events", "DESCRIBE"),
                       ("TOPIC", "acme.schemas", "READ"), ("TOPIC", "acme.schemas", "DESCRIBE")}
    assert {r.principal for r in rules} == {"User:engine", "User:billing", "User:CN=mailer", "User:auditor"}
    auditor = {(r.resource_type, r.name, r.operation) for r in rules if r.principal == "User:auditor"}
    assert all(op in ("READ", "DESCRIBE") for _, _, op in auditor)
    assert ("TOPIC", "acme.commands", "READ") not in auditor
    assert AclRule("User:engine", "TRANSACTIONAL_ID", "PREFIXED", "acme.owner.", "WRITE") in rules
    assert AclRule("User:engine", "GROUP", "LITERAL", "acme.engine", "READ") in rules
    assert len(rules) == len(set(rules))


def test_an_engine_is_granted_exactly_what_an_engine_process_touches() -> None:
    engine = {(r.resource_type, r.pattern, r.name, r.operation) for r in wanted_acls("ns", ["engine"], [], [])}
    assert engine == {
        # commands: consumed, and written inside the owner's transaction (children, occurrences, reports)
        ("TOPIC", "LITERAL", "ns.commands", "READ"), ("TOPIC", "LITERAL", "ns.commands", "WRITE"),
        ("TOPIC", "LITERAL", "ns.commands", "DESCRIBE"),
        ("TOPIC", "LITERAL", "ns.events", "READ"), ("TOPIC", "LITERAL", "ns.events", "WRITE"),
        ("TOPIC", "LITERAL", "ns.events", "DESCRIBE"),
        ("TOPIC", "LITERAL", "ns.tenants", "READ"), ("TOPIC", "LITERAL", "ns.tenants", "DESCRIBE"),  # admins write it
        ("TOPIC", "LITERAL", "ns.workers", "WRITE"), ("TOPIC", "LITERAL", "ns.workers", "DESCRIBE"),
        ("GROUP", "LITERAL", "ns.engine", "READ"), ("GROUP", "PREFIXED", "ns.reader.", "READ"),
        ("TRANSACTIONAL_ID", "PREFIXED", "ns.owner.", "WRITE"),
        ("TRANSACTIONAL_ID", "PREFIXED", "ns.owner.", "DESCRIBE"),
        # schemas: read by every reader, registered (and repaired) by engines only (issues 24, 32)
        ("TOPIC", "LITERAL", "ns.schemas", "READ"), ("TOPIC", "LITERAL", "ns.schemas", "WRITE"),
        ("TOPIC", "LITERAL", "ns.schemas", "DESCRIBE"),
        # checkpoints: the write models' snapshots, written in the owner's transaction (issue 23)
        ("TOPIC", "LITERAL", "ns.checkpoints", "READ"), ("TOPIC", "LITERAL", "ns.checkpoints", "WRITE"),
        ("TOPIC", "LITERAL", "ns.checkpoints", "DESCRIBE"),
    }


def test_every_role_reads_the_schemas_topic_and_only_engines_register_in_it() -> None:
    rules = wanted_acls("acme", ["engine"], ["billing"], ["auditor"])
    on = {(r.principal, r.operation) for r in rules if r.name == "acme.schemas"}
    assert on == {(f"User:{who}", op) for who in ("engine", "billing", "auditor") for op in ("READ", "DESCRIBE")} | {
        ("User:engine", "WRITE")}


def test_acl_apply_revokes_an_older_grant_to_write_the_schemas_topic_and_nothing_else() -> None:
    from engine.runtime.acls import revoked_acls

    wanted = wanted_acls("acme", ["engine"], ["billing"], ["auditor"])
    older = [AclRule("User:billing", "TOPIC", "LITERAL", "acme.schemas", "WRITE"),  # what acl apply granted before
             AclRule("User:mallory", "TOPIC", "LITERAL", "acme.schemas", "ALL")]
    beside = [AclRule("User:billing", "TOPIC", "LITERAL", "acme.schemas", "WRITE", "DENY"),
              AclRule("User:billing", "TOPIC", "LITERAL", "other.schemas", "WRITE"),
              AclRule("User:billing", "TOPIC", "LITERAL", "acme.commands", "WRITE")]
    assert revoked_acls("acme", [*wanted, *older, *beside], wanted) == sorted(older)


def test_a_principal_is_a_user_name_or_given_whole() -> None:
    assert principal("svc") == "User:svc" and principal("User:CN=x,O=y") == "User:CN=x,O=y"
    with pytest.raises(Exception, match="principal"):
        principal(" svc")


def test_the_secure_broker_listens_sasl_ssl_with_the_authorizer_and_a_ca_signed_key_store(tmp_path: Path) -> None:
    setup = make_secure_setup(tmp_path)
    node = NodeSpec(1, 9093, 9094, tmp_path / "node-1" / "data", tls_port=9095)
    conf = node_settings(node, [node], server_settings(setup))
    assert conf["listeners"] == "SASL_SSL://127.0.0.1:9093,SSL://127.0.0.1:9095,CONTROLLER://127.0.0.1:9094"
    assert conf["listener.name.ssl.ssl.client.auth"] == "required"
    assert conf["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert conf["allow.everyone.if.no.acl.found"] == "false"
    assert "PLAINTEXT" not in conf["listener.security.protocol.map"]
    assert set(setup.passwords) == set(USERS) and len(set(setup.passwords.values())) == len(USERS)
    assert (setup.tls.keystore_file.stat().st_mode & 0o077) == 0
    pem = setup.tls.keystore_file.read_bytes()
    key = load_pem_private_key(pem, None)
    chain = x509.load_pem_x509_certificates(pem)
    ca = x509.load_pem_x509_certificate(setup.tls.ca_file.read_bytes())
    assert chain[0].public_key() == key.public_key()
    chain[0].verify_directly_issued_by(ca)
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert len(setup.scram_args()) == 2 * len(USERS)
    assert set(setup.tls.clients) == {"engine", "service", "auditor"}
    cert_path, key_path = setup.tls.clients["service"]
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.subject.rfc4514_string() == "CN=service" and (key_path.stat().st_mode & 0o077) == 0
    cert.verify_directly_issued_by(ca)
    assert load_pem_private_key(key_path.read_bytes(), None).public_key() == cert.public_key()


def test_env_files_are_private_and_load_as_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = make_secure_setup(tmp_path)
    paths = setup.write_env_files("127.0.0.1:9093", "127.0.0.1:9095")
    assert all((p.stat().st_mode & 0o077) == 0 for p in paths.values())
    assert "engine-mtls" in paths and "admin-mtls" not in paths
    for line in paths["service"].read_text().splitlines():
        key, value = line.split("=", 1)
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.sasl_username == "service" and settings.kafka_config()["ssl.ca.location"] == str(
        setup.tls.ca_file)


def test_output_topics_are_granted_to_engines_only_by_name_or_prefix() -> None:
    rules = wanted_acls("ns", ["engine"], ["billing"], ["auditor"], ["billing.invoices", "audit.*"])
    outputs = {(r.principal, r.pattern, r.name, r.operation) for r in rules if not r.name.startswith("ns.")}
    assert outputs == {("User:engine", pattern, name, op) for pattern, name in
                       (("LITERAL", "billing.invoices"), ("PREFIXED", "audit.")) for op in
                       ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")}


@pytest.mark.parametrize("pattern", ["", "*", "bad topic", "a*b*"])
def test_an_output_topic_that_is_no_name_or_prefix_is_refused_naming_the_flag(pattern: str) -> None:
    with pytest.raises(ValidationError, match="--output-topic"):
        wanted_acls("ns", ["engine"], [], [], [pattern])


def test_a_worker_reads_its_pool_s_dispatch_only_and_never_writes_events_and_engines_then_write_dispatches() -> None:
    from engine.runtime.acls import worker_role

    plain = wanted_acls("ns", ["engine"], [], [])
    rules = wanted_acls("ns", ["engine"], [], [], ["billing.*"], [worker_role("gpu-box=gpu")])
    worker = {(r.resource_type, r.pattern, r.name, r.operation) for r in rules if r.principal == "User:gpu-box"}
    assert ("TOPIC", "LITERAL", "ns.dispatch.gpu", "READ") in worker
    assert ("GROUP", "LITERAL", "ns.pool.gpu", "READ") in worker
    assert ("TOPIC", "LITERAL", "ns.commands", "WRITE") in worker
    assert ("TOPIC", "LITERAL", "ns.workers", "WRITE") in worker
    assert not any(name == "ns.events" or (name.startswith("ns.dispatch.") and name != "ns.dispatch.gpu")
                   for _, _, name, _ in worker)
    assert not any(op == "WRITE" and name.startswith("billing") for _, _, name, op in worker)  # engines write those
    engine = {(r.resource_type, r.pattern, r.name, r.operation) for r in rules if r.principal == "User:engine"}
    assert ("TOPIC", "PREFIXED", "ns.dispatch.", "WRITE") in engine
    assert ("TOPIC", "LITERAL", "ns.workers", "READ") in engine
    assert not any(r.name.startswith("ns.dispatch.") for r in plain)  # no workers: the engine's rules as before
    with pytest.raises(ValidationError, match="USER=POOL"):
        worker_role("gpu-box")


def test_a_worker_s_grants_are_exactly_its_pool_s_dispatch_and_group_to_read_and_results_and_heartbeats_to_write(
        ) -> None:
    """`acl apply --worker USER=POOL`, whole: nothing else is readable or writable (which jobs' results it may send
    is not an ACL: the engines check the pool's key per job, docs/security.md)."""
    from engine.runtime.acls import worker_role

    rules = wanted_acls("ns", ["engine"], [], [], [], [worker_role("gpu-box=gpu"), worker_role("cpu-box=cpu")])
    worker = {(r.resource_type, r.pattern, r.name, r.operation) for r in rules if r.principal == "User:gpu-box"}
    assert {g for g in worker if g[3] not in ("READ", "WRITE")} == {
        ("TOPIC", "LITERAL", name, "DESCRIBE") for name in ("ns.dispatch.gpu", "ns.commands", "ns.workers",
                                                            "ns.schemas")}
    assert {g for g in worker if g[3] == "READ"} == {
        ("TOPIC", "LITERAL", "ns.dispatch.gpu", "READ"), ("GROUP", "LITERAL", "ns.pool.gpu", "READ"),
        ("TOPIC", "LITERAL", "ns.schemas", "READ"),  # writer schemas by fingerprint, with a reader group
        ("GROUP", "PREFIXED", "ns.reader.", "READ")}
    assert {g for g in worker if g[3] == "WRITE"} == {
        ("TOPIC", "LITERAL", "ns.commands", "WRITE"), ("TOPIC", "LITERAL", "ns.workers", "WRITE")}
    assert all(r.permission == "ALLOW" for r in rules)
