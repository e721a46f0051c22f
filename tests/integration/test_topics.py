"""Topic ensure on a real broker: idempotent, co-partitioned, and mismatches refused by name."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from engine.config import load_settings
from engine.errors import TopicMismatchError
from engine.runtime.topics import describe_topics, ensure_topics


def test_ensure_creates_the_three_topics_and_is_idempotent(bootstrap: str, unique_ns: str) -> None:
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns)
    first = {t.name: t for t in ensure_topics(settings, partitions=4)}
    again = {t.name: t for t in ensure_topics(settings, partitions=4)}
    assert first == again
    assert first[f"{unique_ns}.commands"].partitions == first[f"{unique_ns}.events"].partitions == 4
    events = first[f"{unique_ns}.events"].config
    assert events["cleanup.policy"] == "delete" and events["retention.ms"] == "-1"
    assert first[f"{unique_ns}.tenants"].config["cleanup.policy"] == "compact"
    cli = subprocess.run([sys.executable, "-m", "engine.cli.main", "topics", "ensure", "--bootstrap", bootstrap,
                          "--namespace", unique_ns, "--partitions", "4"], capture_output=True, text=True)
    assert cli.returncode == 0 and f"{unique_ns}.events: 4 partitions" in cli.stdout


def test_mismatched_partition_counts_are_refused(bootstrap: str, kafka_admin: AdminClient, unique_ns: str) -> None:
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns)
    create(kafka_admin, NewTopic(f"{unique_ns}.commands", 3, 1))
    create(kafka_admin, NewTopic(f"{unique_ns}.events", 5, 1, config={"retention.ms": "-1"}))
    with pytest.raises(TopicMismatchError, match=r"3 partitions but .*events has 5.*co-partitioned"):
        ensure_topics(settings, partitions=3)
    cli = subprocess.run([sys.executable, "-m", "engine.cli.main", "topics", "ensure", "--bootstrap", bootstrap,
                          "--namespace", unique_ns], capture_output=True, text=True)
    assert cli.returncode == 2 and "co-partitioned" in cli.stderr
    assert {t.name: t.partitions for t in describe_topics(settings)}[f"{unique_ns}.events"] == 5  # not "fixed"


def test_a_compacted_events_topic_is_refused(bootstrap: str, kafka_admin: AdminClient, unique_ns: str) -> None:
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns)
    create(kafka_admin, NewTopic(f"{unique_ns}.events", 3, 1, config={"cleanup.policy": "compact"}))
    with pytest.raises(TopicMismatchError, match="compacted"):
        ensure_topics(settings, partitions=3)


def create(admin: AdminClient, topic: NewTopic) -> None:
    for future in admin.create_topics([topic]).values():
        future.result(30)
