"""Against a secure local broker (SASL_SSL, SCRAM-SHA-512, standard authorizer) with `epochq acl apply`:
an engine with the engine user runs jobs; a service writes commands only; an auditor reads events only.

The module starts its own secure broker in a temporary EPOCHQ_BROKER_HOME (one for the module).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from engine import broker
from engine.broker.secure import USERS
from engine.client import Client
from engine.config import Settings
from engine.errors import AccessDeniedError
from engine.runtime.kafka import schemas
from engine.runtime.tenants import set_tenant
from engine.runtime.topics import admin_for, ensure_topics
from tests.integration.conftest import ROOT, EngineProcess, events_by_job, eventually

DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


@pytest.fixture(scope="module")
def secure_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running secure broker's home; stopped at the end of the module, even when tests fail."""
    home = tmp_path_factory.mktemp("secure-broker")
    info = broker.start(nodes=1, home=home, secure=True)
    assert info.secure_dir is not None
    try:
        yield info.secure_dir
    finally:
        broker.stop(home=home)


def user_env(secure_dir: Path, user: str) -> dict[str, str]:
    """The EPOCHQ_* variables `broker start --secure` wrote for ``user`` (``user-mtls``: with its certificate)."""
    lines = (secure_dir / "users" / f"{user}.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


@pytest.fixture(scope="module")
def namespace(secure_home: Path) -> str:
    """A namespace whose topics the admin created and whose ACLs `epochq acl apply` wrote."""
    ns = f"s{uuid.uuid4().hex[:8]}"
    ensure_topics(as_user(secure_home, "admin", ns, Path("/nonexistent")), partitions=3)
    result = cli(secure_home, "admin", "acl", "apply", "--namespace", ns)
    assert result.returncode == 0, result.stderr
    assert "rules in place" in result.stdout
    return ns


def as_user(secure_dir: Path, user: str, namespace: str, state_dir: Path) -> Settings:
    """Settings connecting as ``user``, read from its env file the way a process reads its environment."""
    env = user_env(secure_dir, user)
    fields = {k.removeprefix("EPOCHQ_").lower(): v for k, v in env.items()}
    return Settings(namespace=namespace, state_dir=state_dir, **fields)  # type: ignore[arg-type]


def submitted_and_ended(secure_dir: Path, namespace: str, tmp: Path, task_type: str, timeout: float) -> Any:
    """Submit ``task_type`` {"n": 1} for acme as the service user, then wait as the auditor for its end."""
    service = Client(as_user(secure_dir, "service", namespace, tmp / "none"))
    handle = service.submit(task_type, {"n": 1}, tenant="acme")
    service.close()
    auditor = Client(as_user(secure_dir, "auditor", namespace, tmp / "none"))
    try:
        return eventually(lambda: (o := auditor.status(handle.job_id)).done and o, timeout, f"{task_type} to end")
    finally:
        auditor.close()


def cli(secure_dir: Path, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``epochq ARGS`` as ``user`` (its credentials in the environment only)."""
    env = {**_clean_env(), **user_env(secure_dir, user)}
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHQ_")}


def test_the_broker_refuses_clients_without_credentials_and_prints_no_password(secure_home: Path) -> None:
    env = user_env(secure_home, "service")
    errors: list[KafkaError] = []
    plain = Producer({"bootstrap.servers": env["EPOCHQ_BOOTSTRAP"], "message.timeout.ms": 3000})
    plain.produce("anything", b"x", on_delivery=lambda err, _msg: errors.append(err))
    plain.flush(10)
    assert errors and errors[0] is not None  # a PLAINTEXT client never gets a record in
    status = subprocess.run([sys.executable, "-m", "engine.cli.main", "broker", "status"], cwd=ROOT,
                            env={**_clean_env(), "EPOCHQ_BROKER_HOME": str(secure_home.parents[1])},
                            capture_output=True, text=True)
    assert "(secure)" in status.stdout
    for user in USERS:
        password = user_env(secure_home, user)["EPOCHQ_SASL_PASSWORD"]
        assert password not in status.stdout + status.stderr
        assert password not in repr(as_user(secure_home, user, "x", Path("/nonexistent")))


def test_a_wrong_password_is_said_as_a_refused_login_not_a_transport_failure(secure_home: Path, namespace: str) -> None:
    env = {**_clean_env(), **user_env(secure_home, "admin"), "EPOCHQ_SASL_PASSWORD": "not-the-password",
           "EPOCHQ_NAMESPACE": namespace}
    for args in (("status", str(uuid.uuid4())), ("acl", "list")):  # a client's read; an admin request
        done = subprocess.run([sys.executable, "-m", "engine.cli.main", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (args, done.stderr)
        assert lines[0].startswith("epochq: error: the brokers refused the login (SASL_SSL SCRAM-SHA-512 as admin): "
                                   "SASL authentication error"), lines
        assert "transport failure" not in lines[0] and "not-the-password" not in done.stderr + done.stdout


def test_an_engine_with_the_engine_user_runs_a_job_submitted_by_a_service(
        secure_home: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in user_env(secure_home, "engine").items():
        monkeypatch.setenv(key, value)  # the engine process inherits the engine user's credentials
    engine_settings = as_user(secure_home, "engine", namespace, tmp_path / "state")
    engine = EngineProcess(engine_settings, "secure-engine", tmp_path)
    try:
        engine.wait_active(3)
        assert "SASL_SSL SCRAM-SHA-512 as engine" in engine.logs()
        outcome = submitted_and_ended(secure_home, namespace, tmp_path, "echo", 30)
        assert outcome.status == "completed", engine.logs()[-3000:]
        assert outcome.result["payload"] == {"n": 1}
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]


def test_a_service_writes_commands_but_cannot_write_events_or_read_any_topic(
        secure_home: Path, namespace: str, tmp_path: Path) -> None:
    service = as_user(secure_home, "service", namespace, tmp_path)
    assert _produce_error(service, service.commands_topic) is None
    for topic in (service.events_topic, service.tenants_topic):
        assert _produce_error(service, topic) in DENIED, topic
    for topic in (service.commands_topic, service.events_topic, service.tenants_topic):
        assert _read_error(service, topic) in DENIED, topic
    with pytest.raises(AccessDeniedError, match="AUTHORIZATION_FAILED"):
        Client(service).status(str(uuid.uuid4()))  # refused, not an empty history


def test_an_auditor_reads_events_but_cannot_write_anywhere(secure_home: Path, namespace: str, tmp_path: Path) -> None:
    auditor = as_user(secure_home, "auditor", namespace, tmp_path)
    for topic in (auditor.commands_topic, auditor.events_topic, auditor.tenants_topic):
        assert _produce_error(auditor, topic) in DENIED, topic
    assert _read_error(auditor, auditor.events_topic) is None
    assert _read_error(auditor, auditor.commands_topic) in DENIED
    assert set(schemas.read_schemas(auditor)) == {e.key for e in schemas.shipped()}  # every role reads them
    with pytest.raises(AccessDeniedError, match=r"cannot register the schemas \(command v\d+\) .*only engines"):
        schemas.publish(auditor, [schemas.current("command")])  # one clear error, not a write that never lands
    schemas.ensure_published(auditor, "command")  # refused to write, but registered already (genuine): it goes on


def test_only_engines_write_the_schemas_topic_and_acl_apply_takes_back_an_older_grant(
        secure_home: Path, namespace: str, tmp_path: Path) -> None:
    from engine.runtime.acls import AclRule, apply_acls

    admin = as_user(secure_home, "admin", namespace, Path("/nonexistent"))
    service = as_user(secure_home, "service", namespace, tmp_path)
    engine = as_user(secure_home, "engine", namespace, tmp_path)
    entry = schemas.current("command")  # a genuine entry: the probe leaves the topic as it was

    def refused(settings: Settings) -> bool:
        try:
            schemas.publish(settings, [entry])
        except AccessDeniedError:
            return True
        return False
    assert refused(service)  # `acl apply` gave services READ only
    assert not refused(engine)
    apply_acls(admin, [AclRule("User:service", "TOPIC", "LITERAL", f"{namespace}.schemas", "WRITE")])  # as before
    eventually(lambda: not refused(service), 30, "the older grant in force")
    result = cli(secure_home, "admin", "acl", "apply", "--namespace", namespace)
    assert result.returncode == 0, result.stderr
    assert "revoked: User:service" in result.stdout and "1 rule(s) revoked" in result.stdout
    eventually(lambda: refused(service), 30, "the older grant taken back")
    assert not refused(engine)
    schemas._published.clear()
    with Client(service) as client:  # a service still submits: its schema is registered, it need not write it
        assert client.submit("echo", {"n": 1}, tenant="acme").job_id


def test_a_client_certificate_is_the_same_principal_as_the_scram_user(secure_home: Path, namespace: str,
                                                                      tmp_path: Path) -> None:
    service = as_user(secure_home, "service-mtls", namespace, tmp_path)
    assert service.kafka_config()["security.protocol"] == "SSL" and "sasl.username" not in service.kafka_config()
    assert _produce_error(service, service.commands_topic) is None
    assert _produce_error(service, service.events_topic) in DENIED
    auditor = as_user(secure_home, "auditor-mtls", namespace, tmp_path)
    assert _read_error(auditor, auditor.events_topic) is None
    assert _produce_error(auditor, auditor.commands_topic) in DENIED


def test_no_one_but_the_engine_may_write_events_or_use_its_transactional_ids(
        secure_home: Path, namespace: str, tmp_path: Path) -> None:
    engine = as_user(secure_home, "engine", namespace, tmp_path)
    assert _produce_error(engine, engine.events_topic) is None
    service = as_user(secure_home, "service", namespace, tmp_path)
    producer = Producer({**service.kafka_config(), "transactional.id": f"{namespace}.owner.p0"})
    with pytest.raises(KafkaException) as denied:
        producer.init_transactions(20)
    assert denied.value.args[0].code() in DENIED
    listed = cli(secure_home, "admin", "acl", "list", "--namespace", namespace)
    writers = {line.split()[0] for line in listed.stdout.splitlines()
               if f" {namespace}.events" in line and " WRITE " in line}
    assert writers == {"User:engine"}, listed.stdout


def _produce_error(settings: Settings, topic: str) -> int | None:
    """The error code of producing one record to ``topic`` as ``settings``'s user; ``None`` if it was written."""
    errors: list[KafkaError] = []
    producer = Producer({**settings.kafka_config(), "message.timeout.ms": 10000, "acks": "all"})
    producer.produce(topic, b"probe", key=b"probe", partition=0,
                     on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(20) == 0
    return errors[0].code() if errors else None


def _read_error(settings: Settings, topic: str) -> int | None:
    """The error code of fetching from ``topic`` partition 0; ``None`` if the fetch was allowed.

    Refused: the topic's metadata is (no DESCRIBE), or the fetch is. Allowed: a record or the end
    of the partition came back; neither within 10 s fails the test.
    """
    consumer = Consumer({**settings.kafka_config(), "group.id": f"{settings.namespace}.reader.probe",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        consumer.close()
        return int(meta.error.code())
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        for _ in range(20):
            msg = consumer.poll(0.5)
            error = msg.error() if msg is not None else None
            if msg is not None and (error is None or error.code() == KafkaError._PARTITION_EOF):
                return None
            if error is not None:
                return int(error.code())
        raise AssertionError(f"no answer reading {topic} in 10 s")
    finally:
        consumer.close()


def _start_engine(secure_dir: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  name: str) -> EngineProcess:
    """An `epochq engine run` with the engine user's credentials, as docs/security.md sets one up."""
    for key, value in user_env(secure_dir, "engine").items():
        monkeypatch.setenv(key, value)
    return EngineProcess(as_user(secure_dir, "engine", namespace, tmp_path / f"state-{name}"), name, tmp_path)


def _secure_namespace(secure_dir: Path) -> str:
    ns = f"s{uuid.uuid4().hex[:8]}"
    admin = as_user(secure_dir, "admin", ns, Path("/nonexistent"))
    ensure_topics(admin, partitions=3)
    assert cli(secure_dir, "admin", "acl", "apply", "--namespace", ns).returncode == 0
    for tenant in ("acme", "globex"):
        set_tenant(admin, tenant, 1.0)
    return ns


def test_scoped_jobs_and_schedules_run_under_the_documented_secure_set_up(
        secure_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = _secure_namespace(secure_home)
    engine = _start_engine(secure_home, ns, tmp_path, monkeypatch, "scoped")
    try:
        engine.wait_active(3)
        service = Client(as_user(secure_home, "service", ns, tmp_path / "none"))
        parent = service.submit("echo", {"n": 1}, tenant="ops", scope="global")  # children sent by the engine
        service.add_schedule("tick", "noop", "* * * * * *", tenant="acme", wait=None)  # occurrences: the same
        plain = service.submit("echo", {"n": 2}, tenant="globex")
        after = service.submit("gather", {}, tenant="globex", depends_on=[plain])  # AwaitJob, ReportDependency
        service.close()
        auditor = Client(as_user(secure_home, "auditor", ns, tmp_path / "none"))
        done = eventually(lambda: (o := auditor.status(parent.job_id)).done and o, 60, "final scoped job")
        assert done.status == "completed", engine.logs()[-3000:]
        assert set(done.children) == {"acme", "globex"}
        assert {c["status"] for c in done.children.values()} == {"completed"}
        assert auditor.status(plain.job_id).status == "completed"
        waited = eventually(lambda: (o := auditor.status(after.job_id)).done and o, 60, "final dependent job")
        assert waited.status == "completed" and list(waited.result["dependencies"]) == [plain.job_id]
        reader = as_user(secure_home, "auditor", ns, tmp_path / "none")

        def ran() -> int:
            events = events_by_job(reader)
            fired = [e.event.body for log in events.values() for e in log if e.event.type == "ScheduleFired"]
            return sum(1 for f in fired if any(e.event.type == "JobSucceeded" for e in events.get(f.job_id, [])))
        eventually(lambda: ran() >= 2, 30, "two occurrences of the schedule run")
        auditor.close()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]
    assert "refused" not in engine.logs(), engine.logs()[-3000:]


def test_an_engine_refused_a_write_says_so_in_one_line_and_backs_off(
        secure_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = _secure_namespace(secure_home)
    admin = as_user(secure_home, "admin", ns, Path("/nonexistent"))
    _revoke(admin, f"{ns}.commands", "User:engine", AclOperation.WRITE)  # what `acl apply` used to leave out
    engine = _start_engine(secure_home, ns, tmp_path, monkeypatch, "ungranted")
    try:
        engine.wait_active(3)
        service = Client(as_user(secure_home, "service", ns, tmp_path / "none"))
        parent = service.submit("echo", {}, tenant="ops", scope="global")
        service.close()
        refusal = f"transaction refused: the brokers refuse user engine WRITE on topic {ns}.commands " \
                  "(TOPIC_AUTHORIZATION_FAILED)"
        eventually(lambda: refusal in engine.logs(), 30, "ERROR line naming the topic and the operation")
        eventually(lambda: "refused again (4 in a row)" in engine.logs(), 30, "fourth try")  # 0.5 + 1 + 2 + 4 s later
        lines = engine.logs().splitlines()
        assert [line for line in lines if " ERROR " in line] == [next(x for x in lines if refusal in x)]
        tries = [line for line in lines if "transaction refused" in line or "aborted" in line]
        assert len(tries) <= 6, tries  # spinning: hundreds of aborted tries by now
        assert cli(secure_home, "admin", "acl", "apply", "--namespace", ns).returncode == 0  # granted: it goes on
        auditor = Client(as_user(secure_home, "auditor", ns, tmp_path / "none"))
        done = eventually(lambda: (o := auditor.status(parent.job_id)).done and o, 60, "final scoped job")
        auditor.close()
        assert done.status == "completed", engine.logs()[-3000:]
        assert "accept its transactions again" in engine.logs()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]


def test_a_service_that_may_not_read_events_is_told_so_when_it_waits(
        secure_home: Path, namespace: str, tmp_path: Path) -> None:
    submitted = cli(secure_home, "service", "submit", "echo", "--tenant", "acme", "--namespace", namespace,
                    "--wait", "--timeout", "10")
    added = cli(secure_home, "service", "schedules", "add", "nightly", "--task", "noop", "--cron", "0 3 * * *",
                "--tenant", "acme", "--namespace", namespace)
    for result in (submitted, added):
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"not authorized to read {namespace}.events" in lines[0], result.stderr
        assert "no engine decided" not in result.stderr


def _revoke(admin: Settings, topic: str, who: str, operation: AclOperation) -> None:
    client = admin_for(admin)  # held until the answer is in
    found = client.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                           who, "*", operation, AclPermissionType.ALLOW)])
    for future in found.values():
        assert future.result(), f"no {operation.name} rule of {who} on {topic} to revoke"


def test_a_record_for_a_topic_the_engine_may_not_write_fails_its_attempt_and_no_other(
        secure_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka.admin import NewTopic

    from tests.integration.test_effects import committed_records

    ns = _secure_namespace(secure_home)
    admin = as_user(secure_home, "admin", ns, Path("/nonexistent"))
    topic = f"out.{ns}.invoices"  # outside the namespace: `acl apply` grants it only when named
    admin_client = admin_for(admin)
    for future in admin_client.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(30)
    for key, value in user_env(secure_home, "engine").items():
        monkeypatch.setenv(key, value)
    engine = EngineProcess(as_user(secure_home, "engine", ns, tmp_path / "state-out"), "out", tmp_path,
                           app="tests.integration.effects_app:app")
    service = Client(as_user(secure_home, "service", ns, tmp_path / "none"))
    auditor = Client(as_user(secure_home, "auditor", ns, tmp_path / "none"))

    def run_one() -> Any:
        handle = service.submit("emit.once", {"topic": topic, "size": 10}, tenant="acme")
        return eventually(lambda: (o := auditor.status(handle.job_id)).done and o, 60, "the job's end")
    try:
        engine.wait_active(3)
        refused = run_one()
        assert refused.status == "dead" and "may not WRITE topic" in refused.error, refused.error
        assert f"--output-topic {topic}" in refused.error
        assert "transaction refused" not in engine.logs()  # the partition's transaction was never at stake
        granted = cli(secure_home, "admin", "acl", "apply", "--namespace", ns, "--output-topic", f"out.{ns}.*")
        assert granted.returncode == 0, granted.stderr
        done = eventually(lambda: (o := run_one()).status == "completed" and o, 60, "a job run with the ACL in force")
        assert [k for k, _ in committed_records(admin, topic)] == [done.job_id.encode()]
    finally:
        service.close()
        auditor.close()
        assert engine.stop() == 0, engine.logs()[-3000:]


def test_an_engine_dispatches_to_a_worker_of_its_pool_under_the_documented_acls(
        secure_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/workers.md's pools on a secure broker: `acl apply --worker USER=POOL` is all a worker needs, the engine
    creates the pools' topics with what `acl apply` grants it (before: it asked for DESCRIBE_CONFIGS and stopped),
    and a principal that is no worker of a pool is told so in one line."""
    ns = _secure_namespace(secure_home)
    assert cli(secure_home, "admin", "acl", "apply", "--namespace", ns, "--worker", "service=gpu").returncode == 0
    engine = EngineProcess(_engine_settings(secure_home, ns, tmp_path, monkeypatch), "pools", tmp_path,
                           app="tests.integration.remote_app:app")
    worker: subprocess.Popen[str] | None = None
    try:
        engine.wait_active(3)
        not_a_worker = cli(secure_home, "auditor", "worker", "run", "tests.integration.remote_app:app",
                           "--namespace", ns, "--pool", "gpu")
        assert not_a_worker.returncode == 2 and "Traceback" not in not_a_worker.stderr
        assert "not a worker of pool 'gpu' (an admin grants one: epochq acl apply --worker USER=gpu)" \
            in not_a_worker.stderr, not_a_worker.stderr
        env = {**_clean_env(), **user_env(secure_home, "service")}
        worker = subprocess.Popen([sys.executable, "-m", "engine.cli.main", "worker", "run",
                                   "tests.integration.remote_app:app", "--namespace", ns, "--pool", "gpu"],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        done = submitted_and_ended(secure_home, ns, tmp_path, "remote.echo", 60)
        assert done.status == "completed", engine.logs()[-3000:]
        assert done.result["pid"] == worker.pid
    finally:
        if worker is not None:
            worker.terminate()
            worker.communicate(timeout=30)
        assert engine.stop() == 0, engine.logs()[-3000:]


def _engine_settings(secure_dir: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The engine user's settings, its credentials in the environment for the `engine run` child."""
    for key, value in user_env(secure_dir, "engine").items():
        monkeypatch.setenv(key, value)
    return as_user(secure_dir, "engine", namespace, tmp_path / "state-pools")


def test_a_service_that_may_not_read_events_is_told_to_name_the_tenant_of_a_job_it_cancels(
        secure_home: Path, tmp_path: Path) -> None:
    namespace, job = _secure_namespace(secure_home), str(uuid.uuid4())
    admin = Producer(as_user(secure_home, "admin", namespace, tmp_path).kafka_config())
    for partition in range(3):  # events in every partition: the cancel must read the job's to find its tenant
        admin.produce(f"{namespace}.events", b"not an event", partition=partition)
    assert admin.flush(30) == 0
    refused = cli(secure_home, "service", "cancel", job, "--namespace", namespace)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and "name it with --tenant (and --wait 0 to only send the cancel)" \
        in refused.stderr, refused.stderr
    sent = cli(secure_home, "service", "cancel", job, "--namespace", namespace, "--tenant", "acme", "--wait", "0")
    assert sent.returncode == 0, sent.stderr
