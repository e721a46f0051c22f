"""The metrics endpoint of a real engine: documented names, values that match a known workload."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import eventually, start_engine
from tests.integration.helpers.ports import free_port

DOCUMENTED = ["epochq_jobs_submitted_total", "epochq_jobs_started_total", "epochq_jobs_succeeded_total",
              "epochq_jobs_failed_total", "epochq_jobs_retried_total", "epochq_jobs_dead_lettered_total",
              "epochq_queue_depth", "epochq_dead_letter_depth", "epochq_dead_letter_alert",
              "epochq_partitions_owned", "epochq_partition_epoch", "epochq_job_processing_seconds",
              "epochq_job_lateness_seconds", "epochq_rebalances_total"]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
            totals.setdefault(family.name, 0.0)
    return totals


def test_metrics_match_a_known_workload(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    engine = start_engine(engines, settings, "solo", tmp_path,
                          extra=("--metrics-port", str(port), "--dlq-alert-threshold", "2"))
    engine.wait_active(3)
    good = client.submit_many([{"task_type": "echo", "payload": {"i": i}, "tenant": "acme"} for i in range(8)])
    bad = client.submit_many([{"task_type": "flaky", "payload": {"fixed_when": str(tmp_path / "never")},
                               "tenant": "acme"} for _ in range(2)])
    assert [h.wait(60).status for h in good + bad] == ["completed"] * 8 + ["dead"] * 2
    # the depth gauges are sampled every 5 s
    values = eventually(lambda: (v := scrape(port)).get("epochq_dead_letter_depth") == 2 and v, 20,
                        "the dead-letter depth sampled")
    for name in DOCUMENTED:
        assert name in values, name
    assert values["epochq_jobs_submitted_total"] == 10
    assert values["epochq_jobs_succeeded_total"] == 8
    assert values["epochq_jobs_dead_lettered_total"] == 2
    assert values["epochq_jobs_failed_total"] == 8      # 2 jobs x 4 attempts
    assert values["epochq_jobs_retried_total"] == 6
    assert values["epochq_jobs_started_total"] == 16
    assert values["epochq_dead_letter_depth"] == 2 and values["epochq_dead_letter_alert"] == 1
    assert values["epochq_partitions_owned"] == 3
    assert values["epochq_job_lateness_seconds_count"] == 16
