"""Engine metrics from a known event sequence, the dead-letter alert, the endpoint, and the log formats."""

from __future__ import annotations

import gc
import io
import json
import logging
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from engine.contract import messages as m
from engine.domain.jobs import JobView, evolve
from engine.errors import ConfigError
from engine.runtime.execution.context import JobContext
from engine.runtime.observe.logs import JsonFormatter, KeyValueFormatter, configure_logging, job_extra
from engine.runtime.observe.metrics import EngineMetrics
from tests.unit.factories import event

DOCS = Path(__file__).resolve().parents[4] / "docs" / "metrics.md"
TASK, LANE = "email.send", "NORMAL"
JOB = {"task_type": TASK, "lane": LANE}
LATE_US, RUN_US = 2_000, 1_500


class Workload:
    """Folds events for several jobs with the pure evolve and hands each to the metrics."""

    def __init__(self, metrics: EngineMetrics, live: bool = True):
        self.metrics, self.live = metrics, live
        self.jobs: dict[str, JobView | None] = {}
        self.now = 1_000_000

    def emit(self, job_id: str, body: m.EventBody) -> None:
        self.now += 10_000
        ev = event(body, job_id, at=self.now)
        before = self.jobs.get(job_id)
        after = evolve(before, ev)
        self.jobs[job_id] = after
        self.metrics.observe(ev, "applied", before, after, live=self.live)

    def start(self, job_id: str, attempt: int) -> None:
        self.emit(job_id, m.JobStarted(attempt, due_at=self.now + 10_000 - LATE_US))

    def submit(self, job_id: str) -> None:
        self.emit(job_id, m.JobSubmitted(TASK, m.Payload(b"{}"), 5, LANE, 3))
        self.emit(job_id, m.JobQueued("submitted"))
        self.start(job_id, 1)

    def fail_to_death(self, job_id: str, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            self.emit(job_id, m.JobFailed(attempt, "Boom", "boom", RUN_US))
            if attempt == attempts:
                self.emit(job_id, m.JobDeadLettered("max_attempts_exhausted", attempts))
                return
            self.emit(job_id, m.JobRetryScheduled(attempt + 1, self.now))
            self.emit(job_id, m.JobQueued("retry_due"))
            self.start(job_id, attempt + 1)


def run_workload(metrics: EngineMetrics, live: bool = True) -> Workload:
    """10 jobs submitted and started; 8 succeed; 2 fail 3 times each and are dead-lettered."""
    work = Workload(metrics, live)
    for n in range(10):
        work.submit(f"job-{n}")
    for n in range(8):
        work.emit(f"job-{n}", m.JobSucceeded(1, RUN_US))
    for n in (8, 9):
        work.fail_to_death(f"job-{n}")
    return work


def value(metrics: EngineMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    got = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if got is None else got


@pytest.fixture
def metrics() -> EngineMetrics:
    return EngineMetrics(threshold_dead_letters=3, registry=CollectorRegistry())


def test_counters_match_a_known_workload(metrics: EngineMetrics) -> None:
    run_workload(metrics)
    expected = {"submitted": 10, "started": 14, "succeeded": 8, "failed": 6, "retried": 4, "dead_lettered": 2}
    for what, n in expected.items():
        assert value(metrics, f"epochq_jobs_{what}_total", JOB) == n, what


def test_histograms_match_a_known_workload(metrics: EngineMetrics) -> None:
    run_workload(metrics)
    per_task = {"task_type": TASK}
    assert value(metrics, "epochq_job_processing_seconds_count", per_task) == 8 + 6
    assert value(metrics, "epochq_job_processing_seconds_sum", per_task) == pytest.approx(14 * RUN_US / 1e6)
    assert value(metrics, "epochq_job_lateness_seconds_count", per_task) == 14
    assert value(metrics, "epochq_job_lateness_seconds_sum", per_task) == pytest.approx(14 * LATE_US / 1e6)
    assert value(metrics, "epochq_job_lateness_seconds_bucket", {**per_task, "le": "0.001"}) == 0
    assert value(metrics, "epochq_job_lateness_seconds_bucket", {**per_task, "le": "0.0025"}) == 14


def test_lateness_is_clamped_at_zero(metrics: EngineMetrics) -> None:
    work = Workload(metrics)
    work.emit("early", m.JobSubmitted(TASK, m.Payload(b"{}"), 5, LANE, 3))
    work.emit("early", m.JobQueued("submitted"))
    work.emit("early", m.JobStarted(1, due_at=work.now + 60_000_000))
    assert value(metrics, "epochq_job_lateness_seconds_sum", {"task_type": TASK}) == 0
    assert value(metrics, "epochq_job_lateness_seconds_count", {"task_type": TASK}) == 1


def test_restoring_moves_no_counter(metrics: EngineMetrics) -> None:
    run_workload(metrics, live=False)
    metrics.observe(event(m.OwnershipClaimed(0, "x"), None, epoch=1), "fenced", None, None, live=False)
    counted = [s for family in metrics.registry.collect() for s in family.samples
               if s.name.endswith(("_total", "_count", "_sum", "_bucket"))]
    assert counted and [s for s in counted if s.value != 0] == []


def test_fenced_and_ignored_events_count_only_as_fenced(metrics: EngineMetrics) -> None:
    submitted = m.JobSubmitted(TASK, m.Payload(b"{}"), 5, LANE, 3)
    metrics.observe(event(submitted, "zombie", epoch=1), "fenced", None, None)
    metrics.observe(event(m.JobSucceeded(1, 5), "job-x"), "ignored", None, None)
    metrics.producer_fenced()
    assert value(metrics, "epochq_fenced_writes_total") == 2
    assert value(metrics, "epochq_jobs_submitted_total", JOB) == 0
    assert value(metrics, "epochq_jobs_succeeded_total", JOB) == 0


def test_rejections_and_quarantines(metrics: EngineMetrics) -> None:
    too_big = m.JobRejected(TASK, "payload_too_large", "payload is 2 MB")
    for _ in range(2):
        metrics.observe(event(too_big, "job-r"), "applied", None, None)
    metrics.observe(event(m.JobRejected("made.up", "unknown_task_type"), "job-u"), "applied", None, None)
    quarantined = m.CommandQuarantined("ns.commands", 0, 7, "bad magic", b"\x00")
    metrics.observe(event(quarantined, None), "applied", None, None)
    labels = {"task_type": TASK, "lane": "none", "reason": "payload_too_large"}
    assert value(metrics, "epochq_jobs_rejected_total", labels) == 2
    unknown = {"task_type": "unknown", "lane": "none", "reason": "unknown_task_type"}
    assert value(metrics, "epochq_jobs_rejected_total", unknown) == 1
    assert value(metrics, "epochq_commands_quarantined_total") == 1


def test_task_types_a_producer_made_up_never_become_label_values(metrics: EngineMetrics) -> None:
    for n in range(3):
        metrics.observe(event(m.JobRejected(f"made.up.{n}", "wrong_partition"), f"job-{n}"), "applied", None, None)
    unknown = {"task_type": "unknown", "lane": "none", "reason": "wrong_partition"}
    assert value(metrics, "epochq_jobs_rejected_total", unknown) == 3


def test_dead_letter_alert_flips_at_the_threshold_with_one_warning(
        metrics: EngineMetrics, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="epochq.metrics")
    steps = [(0, 0), (2, 0), (3, 1), (5, 1), (9, 1), (2, 0), (1, 0)]
    for depth, alert in steps:
        metrics.set_depths({"NORMAL": 4, "HIGH": 1}, depth)
        assert value(metrics, "epochq_dead_letter_alert") == alert, depth
        assert value(metrics, "epochq_dead_letter_depth") == depth
    records = [r for r in caplog.records if r.name == "epochq.metrics"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.INFO]
    assert "threshold 3" in records[0].getMessage()


def test_alert_threshold_zero_never_fires(caplog: pytest.LogCaptureFixture) -> None:
    metrics = EngineMetrics(threshold_dead_letters=0)
    metrics.set_depths({}, 10_000)
    assert value(metrics, "epochq_dead_letter_alert") == 0
    assert not [r for r in caplog.records if r.name == "epochq.metrics"]


def test_queue_depth_of_a_lane_no_longer_reported_is_zero(metrics: EngineMetrics) -> None:
    metrics.set_depths({"NORMAL": 4, "HIGH": 1}, 0)
    metrics.set_depths({"NORMAL": 2}, 0)
    assert value(metrics, "epochq_queue_depth", {"lane": "NORMAL"}) == 2
    assert value(metrics, "epochq_queue_depth", {"lane": "HIGH"}) == 0


def test_ownership_and_rebalances(metrics: EngineMetrics) -> None:
    metrics.set_ownership({0: 3, 1: 5})
    metrics.rebalanced()
    metrics.set_ownership({1: 6})
    metrics.rebalanced()
    assert value(metrics, "epochq_partitions_owned") == 1
    assert metrics.registry.get_sample_value("epochq_partition_epoch", {"partition": "0"}) is None
    assert value(metrics, "epochq_partition_epoch", {"partition": "1"}) == 6
    assert value(metrics, "epochq_rebalances_total") == 2


def test_two_instances_in_one_process_do_not_collide() -> None:
    a, b = EngineMetrics(), EngineMetrics()
    a.rebalanced()
    assert value(a, "epochq_rebalances_total") == 1
    assert value(b, "epochq_rebalances_total") == 0


def documented_names() -> set[str]:
    return set(re.findall(r"`(epochq_[a-z_]+)", DOCS.read_text()))


def served_names(metrics: EngineMetrics) -> set[str]:
    return {f.name + "_total" if f.type == "counter" else f.name for f in metrics.registry.collect()}


def test_every_metric_is_documented_and_every_documented_metric_exists(metrics: EngineMetrics) -> None:
    assert served_names(metrics) == documented_names()


def test_endpoint_serves_the_documented_names_and_values(metrics: EngineMetrics) -> None:
    run_workload(metrics)
    metrics.observe(event(m.JobRejected(TASK, "invalid_priority"), "job-r"), "applied", None, None)
    metrics.observe(event(m.JobRequeued(1, 1, "handover"), "job-q"), "applied", None, None)
    metrics.observe(event(m.CommandRefused("ReportAttempt", "completed", "stale_token: …"), "job-s"), "applied", None,
                    None)
    metrics.set_depths({"NORMAL": 0}, 2)
    metrics.set_ownership({0: 1})
    metrics.set_timers(0, (3, 1))
    metrics.set_rocksdb_memory({"block_cache": 3 << 20, "memtables": 1 << 20, "table_readers": 0})
    metrics.set_pools({"gpu": (8, 3, 1)})
    metrics.set_pools({"gpu": (8, 2, 4)})  # lease expiries so far: the counter moves by the difference
    metrics.set_pools_queued({"gpu": 5})
    metrics.watch_gc()
    gc.collect(0)
    metrics.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5) as response:
            assert response.status == 200
            body = response.read().decode()
    finally:
        metrics.close()
    for name in documented_names():
        assert re.search(rf"^{name}(_bucket|_count|_sum)?[{{ ]", body, re.MULTILINE), name
    assert 'epochq_jobs_submitted_total{lane="NORMAL",task_type="email.send"} 10.0' in body
    assert 'epochq_jobs_dead_lettered_total{lane="NORMAL",task_type="email.send"} 2.0' in body
    assert "epochq_dead_letter_depth 2.0" in body
    assert 'epochq_rocksdb_memory_bytes{kind="memtables"} 1.048576e+06' in body
    assert 'epochq_pool_in_flight{pool="gpu"} 2.0' in body
    assert 'epochq_pool_lease_expiries_total{pool="gpu"} 4.0' in body
    assert 'epochq_pool_queued{pool="gpu"} 5.0' in body


# --- log formats ----------------------------------------------------------------------------


def render(formatter: logging.Formatter, emit) -> str:  # type: ignore[no-untyped-def]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("epochq.handler.email.send")
    logger.addHandler(handler)
    propagate, level = logger.propagate, logger.level
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        emit()
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        logger.setLevel(level)
    return stream.getvalue()


def handler_context() -> JobContext:
    return JobContext.create(job_id="job-7", tenant="acme", task_type="email.send", attempt=2, epoch=3,
                             partition=1, idempotency_key=None, deadline=0.0)


def test_text_lines_of_a_handler_carry_the_job_fields() -> None:
    ctx = handler_context()
    line = render(KeyValueFormatter(), lambda: ctx.logger.info("sent to %s", "bob"))
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO epochq\.handler\.email\.send ", line)
    assert line.rstrip("\n").endswith(
        "sent to bob job_id=job-7 tenant=acme epoch=3 partition=1 attempt=2 task_type=email.send")


def test_text_quotes_values_with_spaces_and_keeps_fields_before_the_traceback() -> None:
    logger = logging.getLogger("epochq.handler.email.send")

    def boom() -> None:
        try:
            raise ValueError("nope")
        except ValueError:
            logger.exception("failed", extra={"tenant": "big corp", "job_id": "j"})
    text = render(KeyValueFormatter(), boom)
    first, *rest = text.splitlines()
    assert first.endswith('failed job_id=j tenant="big corp"')
    assert rest[0].startswith("Traceback") and "ValueError: nope" in text


def test_json_lines_parse_and_carry_the_job_fields() -> None:
    ctx = handler_context()
    out = render(JsonFormatter(), lambda: ctx.logger.warning("slow: %d ms", 1200))
    doc = json.loads(out)
    assert doc["level"] == "WARNING" and doc["logger"] == "epochq.handler.email.send"
    assert doc["message"].endswith("slow: 1200 ms")
    assert {k: doc[k] for k in ("job_id", "tenant", "epoch", "partition", "attempt", "task_type")} == {
        "job_id": "job-7", "tenant": "acme", "epoch": 3, "partition": 1, "attempt": 2, "task_type": "email.send"}


def test_job_extra_from_an_event_and_from_a_job() -> None:
    started = event(m.JobStarted(2, 0), "job-1", epoch=4)
    assert job_extra(started, 5) == {"job_id": "job-1", "tenant": "acme", "epoch": 4, "partition": 5, "attempt": 2}
    submitted = event(m.JobSubmitted(TASK, m.Payload(b"{}"), 5, LANE, 3), "job-1", epoch=4)
    job = evolve(None, submitted)
    assert job is not None
    assert job_extra(job, 5) == {"job_id": "job-1", "tenant": "acme", "epoch": 4, "partition": 5, "attempt": 0,
                                 "task_type": TASK}
    assert job_extra(event(m.OwnershipClaimed(5, "o"), None, tenant=None), 5) == {"epoch": 1, "partition": 5}
    assert job_extra(handler_context(), 1) == {"job_id": "job-7", "tenant": "acme", "epoch": 3, "partition": 1,
                                               "attempt": 2, "task_type": "email.send"}


def test_configure_logging_installs_one_handler_and_checks_its_arguments() -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        configure_logging("debug", "json")
        configure_logging("info", "text")
        added = [h for h in root.handlers if h not in before]
        assert len(added) == 1 and isinstance(added[0].formatter, KeyValueFormatter)
        assert root.level == logging.INFO
        with pytest.raises(ConfigError, match="--log-format"):
            configure_logging("info", "xml")
        with pytest.raises(ConfigError, match="--log-level"):
            configure_logging("loud")
    finally:
        for h in [h for h in root.handlers if h not in before]:
            root.removeHandler(h)
        root.setLevel(level)


def test_garbage_collections_are_timed_by_generation_until_close():
    metrics = EngineMetrics()
    metrics.watch_gc()
    gc.collect(0)
    gc.collect(2)
    count = metrics.registry.get_sample_value
    assert count("epochq_gc_pause_seconds_count", {"generation": "0"}) >= 1
    assert count("epochq_gc_pause_seconds_count", {"generation": "2"}) >= 1
    metrics.close()
    before = count("epochq_gc_pause_seconds_count", {"generation": "2"})
    gc.collect(2)
    assert count("epochq_gc_pause_seconds_count", {"generation": "2"}) == before


def test_refused_commands_are_counted_by_command_and_reason_code(metrics: EngineMetrics) -> None:
    stale = m.CommandRefused("ReportAttempt", "running", "stale_token: token 5 (attempt 1) is not the running one's")
    for _ in range(2):
        metrics.observe(event(stale, "job-s"), "applied", None, None)
    metrics.observe(event(m.CommandRefused("CancelJob", "queued", "tenant: job x is not tenant y's"), "job-t"),
                    "applied", None, None)
    metrics.observe(event(m.CommandRefused("Made.Up", "queued", "whatever text"), "job-u"), "applied", None, None)
    assert value(metrics, "epochq_commands_refused_total", {"command": "ReportAttempt", "reason": "stale_token"}) == 2
    assert value(metrics, "epochq_commands_refused_total", {"command": "CancelJob", "reason": "tenant"}) == 1
    assert value(metrics, "epochq_commands_refused_total", {"command": "unknown", "reason": "other"}) == 1
