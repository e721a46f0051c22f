"""The test handlers, in an engine whose owners' producers fail for good once, without a fence (issue 32, item 6).

The first transaction committed after the file ``<marks>/fail-commit`` exists raises what librdkafka raised in a
rehearsal at EndTxn: a fatal ``INVALID_TXN_STATE`` (its open race), the transaction left open on the brokers. After
``<marks>/fail-commit-committed`` exists, the next commit goes through and then raises the same error: the engine
cannot tell which of the two happened. Both are armed at the Kafka edge (``engine/runtime/kafka/faults.py``)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from engine.runtime.kafka import faults
from tests.integration.apps import MARKS, app

__all__ = ["app"]

REASON = "Failed to end transaction: Broker: Producer attempted a transactional operation in an invalid state"

faults.fail_commit_once(KafkaError.INVALID_TXN_STATE, REASON, (MARKS / "fail-commit").exists)
faults.fail_commit_once(KafkaError.INVALID_TXN_STATE, REASON, (MARKS / "fail-commit-committed").exists,
                        commit_first=True)
