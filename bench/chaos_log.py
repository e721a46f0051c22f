"""What a chaos trial did to its jobs, counted from the events topic alone (committed records only).

A job is *lost* if it was acknowledged to the client but has no terminal event; a *double* has
more than one terminal event; a *re-execution* is a ``JobStarted`` beyond a job's first.  Only
events the fold counts (not fenced by a newer claim, see ``with_fencing``) are counted; fenced
ones are counted apart: they are a zombie's writes that reached the log but change nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.contract.partitioner import partition_for
from engine.errors import DecodeError
from engine.runtime import kafka
from engine.questions.history import LoggedEvent, with_fencing

TERMINAL = (m.JobSucceeded, m.JobDeadLettered, m.JobCancelled, m.JobRejected, m.JobSettled)


class LogReader:
    """Reads every partition of a namespace's events topic from offset 0, catching up on demand."""

    def __init__(self, settings: Settings, partitions: int):
        self.topic, self.partitions = settings.events_topic, partitions
        self.consumer = kafka.events_reader(settings, f"chaos-{time.time_ns()}")
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(partitions)])
        self.records: dict[int, list[tuple[int, m.Event]]] = {p: [] for p in range(partitions)}
        self.next: dict[int, int] = dict.fromkeys(range(partitions), 0)

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition reached the end offset it had when called."""
        ends = kafka.end_offsets(self.consumer, self.topic, range(self.partitions))
        deadline = time.monotonic() + timeout
        while any(self.next[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in self.consumer.consume(5000, 0.2):
                if msg.error():
                    continue
                p, offset = msg.partition(), msg.offset()
                self.next[p] = offset + 1
                try:
                    self.records[p].append((offset, decode_event_at(msg.value(), self.topic, p, offset)))
                except DecodeError:
                    continue

    def logged(self) -> list[LoggedEvent]:
        """Every event read so far with the fold's fencing verdict, partition after partition."""
        return [e for p in range(self.partitions) for e in with_fencing(self.records[p], None)]

    def terminal_ids(self) -> set[str]:
        """Job ids with at least one terminal event (fenced or not: for waiting only)."""
        return {e.job_id for recs in self.records.values() for _, e in recs
                if e.job_id and isinstance(e.body, TERMINAL)}

    def close(self) -> None:
        self.consumer.close()


@dataclass(frozen=True, slots=True)
class Figures:
    """One trial's figures."""

    submitted: int
    lost: int
    doubles: int
    reexecuted: int
    fenced: int
    takeover_s: float | None
    pause_s: float
    lost_story: tuple[str, ...] = ()  # the first lost jobs, each with its events (for a look)
    reexecuted_by_partition: tuple[tuple[int, int], ...] = ()  # (partition, re-executions), where any
    reexecuted_story: tuple[str, ...] = ()  # the first re-executed job, with its events


def count(reader: LogReader, submitted: set[str], since_us: int, moved: set[int], new_owner: str | None) -> Figures:
    """The trial's figures; takeover is timed from ``since_us`` to ``new_owner``'s first start on ``moved``."""
    logged = reader.logged()
    live = [e.event for e in logged if not e.fenced]
    terminals = Counter(e.job_id for e in live if isinstance(e.body, TERMINAL) and e.job_id in submitted)
    starts = Counter(e.job_id for e in live if isinstance(e.body, m.JobStarted) and e.job_id in submitted)
    return Figures(
        submitted=len(submitted),
        lost=sum(1 for j in submitted if terminals[j] == 0),
        doubles=sum(1 for n in terminals.values() if n > 1),
        reexecuted=sum(n - 1 for n in starts.values() if n > 1),
        fenced=sum(1 for e in logged if e.fenced),
        takeover_s=_takeover(reader, since_us, moved, new_owner),
        pause_s=longest_pause(sorted(e.occurred_at for e in live if isinstance(e.body, TERMINAL))),
        reexecuted_by_partition=_by_partition(starts, reader.partitions),
        reexecuted_story=tuple(_story(reader, logged, j) for j in sorted(j for j, n in starts.items() if n > 1)[:1]),
        lost_story=tuple(_story(reader, logged, j) for j in sorted(j for j in submitted if terminals[j] == 0)[:3]),
    )


def _by_partition(starts: Counter[str], partitions: int) -> tuple[tuple[int, int], ...]:
    extra: Counter[int] = Counter()
    for job_id, n in starts.items():
        if n > 1:
            extra[partition_for(job_id, partitions)] += n - 1
    return tuple(sorted(extra.items()))


def _story(reader: LogReader, logged: list[LoggedEvent], job_id: str) -> str:
    """A lost job's partition and events (type, owner, epoch, fenced or not)."""
    part = partition_for(job_id, reader.partitions)
    events = [f"{type(e.event.body).__name__}@{e.offset}/{e.event.owner}/e{e.event.epoch}"
              + ("/fenced" if e.fenced else "") for e in logged if e.event.job_id == job_id]
    return f"{job_id} (partition {part}): {' '.join(events) or 'no event at all'}"


def _takeover(reader: LogReader, since_us: int, moved: set[int], new_owner: str | None) -> float | None:
    if new_owner is None or not moved:
        return None
    firsts = [e.occurred_at for p in moved for _, e in reader.records[p]
              if isinstance(e.body, m.JobStarted) and e.owner == new_owner and e.occurred_at >= since_us]
    return (min(firsts) - since_us) / 1e6 if firsts else None


def longest_pause(times_us: list[int]) -> float:
    """The longest gap, in seconds, between consecutive times (sorted, µs)."""
    return max((b - a for a, b in zip(times_us, times_us[1:])), default=0) / 1e6
