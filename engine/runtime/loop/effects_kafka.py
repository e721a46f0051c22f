"""The write step's part of ``ctx.produce`` (see ``effects``): the staged records into the open transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from engine.runtime import kafka
from engine.runtime.loop.effects import Output

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from engine.runtime.loop.write import Written

RECORD_FAULTS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_EXCEPTION,
    KafkaError.INVALID_REQUIRED_ACKS, KafkaError.POLICY_VIOLATION, KafkaError._UNKNOWN_TOPIC,
    KafkaError._MSG_TIMED_OUT,
})
"""Delivery errors that are the record's own (its size, its topic), not the transaction's. A record that timed
out is blamed too: a topic deleted after the check times out its records, and re-deciding the same records would
abort every transaction after it; in an outage the attempts blamed are retried by their policy."""


def produce(written: Written, producer: Producer) -> None:
    """Produce the staged records into the open transaction, each with a report of its own refusal."""
    for output in written.staged.outputs:
        report = _on_delivery(written, output)
        for record in output.records:
            try:
                kafka.produce(producer, record.topic, record.value, record.key, -1, report,
                              list(record.headers) if record.headers else None)
            except KafkaException as e:  # refused at once (a topic known to be missing): name the attempt
                _blame(written, output, record.topic, e.args[0])
                raise kafka.translate(e) from e


def _on_delivery(written: Written, output: Output) -> Any:
    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            _blame(written, output, msg.topic(), err)
    return on_delivery


def _blame(written: Written, output: Output, topic: str, err: KafkaError) -> None:
    if err.code() in RECORD_FAULTS:
        written.refused[(output.job_id, output.attempt)] = f"{topic}: {err.name()}: {err.str()}"


