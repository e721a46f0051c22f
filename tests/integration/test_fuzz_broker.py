"""Garbage on a real broker: thousands of malformed records among valid jobs, each one accounted for.

The records come from bench/garbage.py (the generator its memory benchmark sends), produced
straight to ``<ns>.commands`` with a plain producer: no client-side checks. Every record must
have an outcome in the events log (docs/contract.md): a ``CommandQuarantined`` naming its offset
(it is not a command), or events caused by its command id (keyed by its job id when the command id is
over its bound): ``JobRejected``, ``CommandRefused``, or a ``JobSubmitted`` whose job then ends. No
record may need the poison path (``engine_error``): the rules, not the safety net, must answer garbage.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer

from bench.garbage import Record, produce, records, valid
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_command, decode_event_at
from engine.errors import DecodeError
from engine.runtime import kafka
from tests.integration.conftest import eventually, start_engine

GARBAGE, VALID, SEED = 3000, 300, 11
ENDS = {m.JobSucceeded: "completed", m.JobDeadLettered: "dead", m.JobCancelled: "cancelled",
        m.JobScheduled: "scheduled"}
ALLOWED = {  # outcomes each kind of garbage may have; "flipped" may decode to anything
    "bytes": {"quarantined"}, "truncated": {"quarantined"}, "foreign": {"quarantined"}, "null": {"quarantined"},
    "wrong_partition": {"rejected:wrong_partition"}, "unknown_task": {"rejected:unknown_task_type"},
    "no_such_job": {"refused"}, "oversized": {"quarantined", "rejected:payload_too_large"}, "valid": {"completed"},
}


@dataclass
class Outcomes:
    """What the events log says happened, read incrementally from every partition."""

    partitions: int
    next_offset: dict[int, int] = field(default_factory=dict)
    quarantined: set[tuple[int, int]] = field(default_factory=set)
    caused: dict[str, list[m.Event]] = field(default_factory=lambda: defaultdict(list))
    uncaused: dict[str, list[m.Event]] = field(default_factory=lambda: defaultdict(list))  # by job id
    fate: dict[str, str] = field(default_factory=dict)

    def read(self, settings: Settings) -> None:
        """Fold the events written since the last read."""
        consumer = kafka.events_reader(settings, "fuzz")
        try:
            for p in range(self.partitions):
                for offset, _, value in kafka.scan_partition(consumer, settings.events_topic, p,
                                                             self.next_offset.get(p, 0), idle_s=0.5):
                    self._index(p, decode_event_at(value, settings.events_topic, p, offset))
                    self.next_offset[p] = offset + 1
        finally:
            consumer.close()

    def _index(self, p: int, event: m.Event) -> None:
        if isinstance(event.body, m.CommandQuarantined):
            self.quarantined.add((p, event.body.offset))
        if event.causation_id:
            self.caused[event.causation_id].append(event)
        elif event.job_id is not None:  # an answer to a command whose id is over its bound carries none
            self.uncaused[event.job_id].append(event)
        end = ENDS.get(type(event.body))
        if end is not None and event.job_id is not None:
            self.fate[event.job_id] = end

    def of(self, record: Record, at: tuple[int, int]) -> str:
        """The record's outcome: quarantined, rejected:<reason>, refused, duplicate, an admitted job's fate,
        or missing (nothing yet)."""
        try:
            command = decode_command(record.value or b"")
        except DecodeError:
            return "quarantined" if at in self.quarantined else "missing"
        if at in self.quarantined:
            return "quarantined:poison"
        answers = self.caused.get(command.command_id) or [
            e for e in self.uncaused.get(command.job_id, []) if isinstance(e.body, (m.JobRejected, m.CommandRefused))]
        for event in answers:
            if isinstance(event.body, m.JobRejected):
                return f"rejected:{event.body.reason}"
            if isinstance(event.body, m.CommandRefused):
                return "refused"
            if isinstance(event.body, m.DuplicateSubmitted):
                return "duplicate"
            if isinstance(event.body, m.JobSubmitted):
                return self.fate.get(command.job_id, "pending")
        return "missing"


def test_every_malformed_record_is_accounted_for_and_every_valid_job_completes(  # type: ignore[no-untyped-def]
        settings: Settings, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    rng = random.Random(SEED)
    batch = list(itertools.islice(records(rng, 3), GARBAGE)) + [valid(rng, 3) for _ in range(VALID)]
    rng.shuffle(batch)
    engine.wait_active(3)

    placed = produce(Producer({"bootstrap.servers": settings.require_bootstrap(), "acks": "all"}),
                     settings.commands_topic, batch)
    log = Outcomes(3)

    def accounted() -> Counter[tuple[str, str]]:
        log.read(settings)
        outcome = [log.of(record, at) for record, at in zip(batch, placed)]
        by_kind = Counter((record.kind, result) for record, result in zip(batch, outcome))
        unaccounted = [(r.kind, at, r.value[:40] if r.value else r.value)
                       for r, at, result in zip(batch, placed, outcome) if result in ("missing", "pending")]
        assert not unaccounted, f"{len(unaccounted)} records with no outcome, e.g. {unaccounted[:5]}; {by_kind}"
        return by_kind

    by_kind = eventually(accounted, 60, every=0.5)
    assert by_kind[("valid", "completed")] == VALID, by_kind
    for (kind, result), n in by_kind.items():
        assert result in ALLOWED.get(kind, {result}), (kind, result, n)
        assert result not in ("quarantined:poison", "rejected:engine_error"), (kind, result, n)  # no poison path
    assert by_kind[("absurd", "rejected:invalid_run_at")] and by_kind[("absurd", "rejected:invalid_job_id")]
    assert by_kind[("absurd", "rejected:invalid_tenant")], by_kind
    assert engine.proc.poll() is None
    assert "Traceback" not in engine.logs() and "setting it aside" not in engine.logs()
