"""Lateness from the log: how long after its due time each attempt started, per task type, exact percentiles.

Every ``JobStarted`` carries the attempt's ``due_at`` (the job's due time, or its submission
time if it had none); its envelope's ``occurred_at`` is when the owner decided the start.
Their difference is the lateness the issue calls a first-class figure. The task type is
in the job's ``JobSubmitted`` (same partition, earlier offset), or in the job's record
when the state directory holds the partition's projection (then nothing is kept in memory
per job).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError, ValidationError
from engine.runtime.kafka.ports import TopicReader, topic_reader
from engine.questions.stores import partition_dirs
from projections.store import ProjectionStore
from projections.views.jobs import read_job

QUANTILES = (50.0, 95.0, 99.0, 99.9)


def percentile(ordered: list[int] | array[int], q: float) -> int:
    """The q-th percentile (0..100) of sorted values, by nearest rank (an observed value, never interpolated)."""
    if not ordered:
        raise ValidationError("percentile of no values", "values")
    rank = -(-q * len(ordered) // 100)  # ceil(q/100 * n)
    return ordered[min(len(ordered), max(1, int(rank))) - 1]


@dataclass(frozen=True, slots=True)
class Lateness:
    """One task type's lateness figures, in microseconds."""

    task_type: str
    count: int
    quantiles: dict[float, int]
    max_us: int
    mean_us: float

    def as_json(self) -> dict[str, object]:
        """The stable JSON form (milliseconds), documented in docs/cli.md."""
        out: dict[str, object] = {"task_type": self.task_type, "count": self.count,
                                  "max_ms": self.max_us / 1000, "mean_ms": round(self.mean_us / 1000, 3)}
        out.update({f"p{q:g}_ms": v / 1000 for q, v in self.quantiles.items()})
        return out


def summarize(task_type: str, values: array[int]) -> Lateness:
    """Exact percentiles of a task type's lateness values (µs)."""
    ordered = sorted(values)
    return Lateness(task_type, len(ordered), {q: percentile(ordered, q) for q in QUANTILES}, ordered[-1],
                    sum(ordered) / len(ordered))


def collect(settings: Settings, task_type: str | None = None, since_us: int | None = None,
            partitions: list[int] | None = None) -> dict[str, array[int]]:
    """Lateness values (µs, attempts started at or after ``since_us``) per task type, from every partition.

    With ``since_us`` and a store of the partition (which knows every job's task type), the
    partition is read from the first offset written at or after ``since_us`` (Kafka's time
    index); otherwise from offset 0, to learn task types from the ``JobSubmitted`` events.
    """
    topic = settings.events_topic
    stores = dict(partition_dirs(settings))
    values: dict[str, array[int]] = {}
    with topic_reader(settings, "lateness") as reader:
        chosen = partitions if partitions is not None else reader.partitions(topic)
        starts = first_offsets(reader, topic, [p for p in chosen if p in stores], since_us) if since_us else {}
        for p in chosen:
            for kind, late in _started(reader, topic, p, stores.get(p), since_us, starts.get(p, 0)):
                if task_type is None or kind == task_type:
                    values.setdefault(kind, array("q")).append(late)
    return values


def _started(reader: TopicReader, topic: str, p: int, store_dir: Path | None,
             since_us: int | None, start: int = 0) -> Iterator[tuple[str, int]]:
    store = open_store(store_dir)
    kinds: dict[str, str] = {}  # job id -> task type, only when no projection is at hand
    try:
        for offset, _, value in reader.scan(topic, p, start):
            try:
                event = decode_event_at(value, topic, p, offset)
            except DecodeError:
                continue
            body = event.body
            if isinstance(body, m.JobSubmitted) and store is None and event.job_id:
                kinds[event.job_id] = body.task_type
            elif isinstance(body, m.JobStarted) and (since_us is None or event.occurred_at >= since_us):
                yield task_type_of(event.job_id or "", kinds, store), max(0, event.occurred_at - body.due_at)
    finally:
        if store is not None:
            store.close()


def first_offsets(reader: TopicReader, topic: str, partitions: list[int], since_us: int) -> dict[int, int]:
    """Per partition, the first offset whose record was written at or after ``since_us`` (the end if none)."""
    if not partitions:
        return {}
    found = reader.offsets_at(topic, partitions, since_us // 1000)
    ends = reader.end_offsets(topic, partitions)
    return {p: offset if offset >= 0 else ends[p] for p, offset in found.items()}


def open_store(path: Path | None) -> ProjectionStore | None:
    """A read-only view of the store at ``path``; None without one that opens (the log alone answers then)."""
    if path is None:
        return None
    try:
        return ProjectionStore(path, read_only=True)
    except Exception:  # noqa: BLE001 - no usable projection: fall back to the log alone
        return None


def task_type_of(job_id: str, kinds: dict[str, str], store: ProjectionStore | None) -> str:
    """The job's task type: from the ``JobSubmitted`` seen (``kinds``: no store read), else from the store's
    record, else unknown."""
    kind = kinds.get(job_id)
    if kind is not None:
        return kind
    job = read_job(store, job_id) if store is not None else None
    return job.task_type if job is not None else "unknown"


def report(settings: Settings, task_type: str | None = None, since_us: int | None = None) -> list[Lateness]:
    """Lateness figures per task type, by task type."""
    return [summarize(kind, vals) for kind, vals in sorted(collect(settings, task_type, since_us).items())]
