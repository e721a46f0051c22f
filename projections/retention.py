"""The view's retention: a finished job (completed, cancelled) leaves the view ``keep`` after it finished.

Driven by event time inside the fold step, never by the clock or by when a batch commits: after
each event, :meth:`Retention.after` notes a job that has just finished, and when the event's
time is past the last sweep by a ten-thousandth of ``keep`` (at least a second, at most
SWEEP_EVERY_S) it sweeps at most SWEEP_LIMIT jobs that finished more than ``keep`` before it (the
next events sweep the rest). A sweep looks at the committed entries and at the ones staged since
the last commit, which :class:`Retention` keeps a list of (looking through every staged change at
every new second made a replay of a sparse history quadratic in the records per commit). Every
read goes through the batch (staged changes first), so a rebuild from offset 0 reaches the same
bytes whatever its commit points.

A job that leaves takes with it its record, its catalog entries and counts, its labels, its
history index and its tenant index entry. A rejected submit's entry (``projections.views.rejected``)
leaves ``keep`` after it was rejected. Dead letters stay until replayed or purged. The events
topic keeps everything: once a store has let a job go (``PRUNED``), a job it does not index is
looked up in the log (``engine.questions.stores``).
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.contract import messages as m
from engine.domain.jobs import JobView
from projections.batch import Batch
from projections.evolve import Folded
from projections.views import keys as k
from projections.views.indexes import index_entries
from projections.views.jobs import decode_job
from projections.views.rejected import expired, rejected_key
from projections.views.listing import STATUS_OF, SEP, counter_key, label_entries, listing_keys, rolled_up

FINISHED = b"V:f:"    # V:f:<finished_at>:<job_id> -> b"": finished jobs, oldest first
LABELS = b"V:l:"      # V:l:<job_id> -> its labels as name\x1fvalue\x1e...: what to delete with it
SWEPT = b"m:swept"    # the second of event time the last sweep ran at
PRUNED = b"m:pruned"  # present once any job has left this store
LEAVES = frozenset({"completed", "cancelled"})
SWEEP_LIMIT = 1000
SWEEP_EVERY_S = 60
"""Event time between two sweeps at most (a ten-thousandth of ``keep``, at least a second): a finished job leaves
between ``keep`` and ``keep`` + that after it finished."""
SECOND_US = 1_000_000
DAY_US = 86_400 * SECOND_US


def finished_key(finished_at: int, job_id: str) -> bytes:
    """The retention entry of a job that finished at ``finished_at``."""
    return FINISHED + k.num(finished_at) + b":" + job_id.encode()


class Retention:
    """What leaves a view store, and when; ``keep_us`` 0 keeps everything forever."""

    __slots__ = ("keep_us", "every_s", "_staged", "_staged_in", "_rejected")

    def __init__(self, keep_us: int):
        self.keep_us = keep_us
        self.every_s = min(SWEEP_EVERY_S, max(1, keep_us // 10_000 // SECOND_US))
        self._staged: list[bytes] = []  # the retention entries this object put into the batch's pending changes
        self._staged_in: object = None  # ... that changes dict (a commit starts a new one)
        self._rejected: list[bytes] = []  # the rejected submits' entries put into the same changes

    def after(self, batch: Batch, event: m.Event, folded: Folded) -> None:
        """Note what ``event`` did to its job, and sweep when its time is ``every_s`` past the last sweep."""
        if not self.keep_us:
            return
        before, after = folded.before, folded.after
        if after is not None and after is not before:
            self._note(batch, event, before, after)
        elif isinstance(event.body, m.JobRejected) and event.job_id:
            self._fresh(batch)
            self._rejected.append(rejected_key(event.occurred_at, event.job_id))
        second = event.occurred_at // SECOND_US
        swept = batch.get(SWEPT)
        if swept is None or second >= int(swept) + self.every_s:
            fresh = batch.changes is self._staged_in
            cutoff = event.occurred_at - self.keep_us
            looked = sweep(batch, cutoff, self._staged if fresh else [])
            rejections = _sweep_rejected(batch, cutoff, self._rejected if fresh else [])
            if looked < SWEEP_LIMIT and rejections < SWEEP_LIMIT:
                batch.put(SWEPT, b"%d" % second)

    def _fresh(self, batch: Batch) -> None:
        """Start the lists of staged entries again when the batch has committed since."""
        if batch.changes is not self._staged_in:
            self._staged, self._rejected, self._staged_in = [], [], batch.changes

    def _note(self, batch: Batch, event: m.Event, before: JobView | None, after: JobView) -> None:
        if before is None and isinstance(event.body, m.JobSubmitted) and event.body.labels:
            batch.put(LABELS + after.job_id.encode(),
                      b"\x1e".join(n.encode() + SEP + v.encode() for n, v in sorted(event.body.labels.items())))
        if STATUS_OF[after.state] in LEAVES and (before is None or STATUS_OF[before.state] not in LEAVES):
            key = finished_key(after.finished_at or 0, after.job_id)
            batch.put(key, b"")
            self._fresh(batch)
            self._staged.append(key)


def sweep(batch: Batch, cutoff_us: int, staged: list[bytes] | None = None) -> int:
    """Remove up to SWEEP_LIMIT jobs that finished before ``cutoff_us``; how many entries were looked at.

    ``staged``: every retention entry put into ``batch`` since its last commit, when the caller knows them
    (None: look through the batch's changes for them)."""
    if cutoff_us <= 0:
        return 0
    if staged is None:
        staged = [key for key in batch.changes if key.startswith(FINISHED)]
    entries = list(_expired(batch, FINISHED + k.num(cutoff_us), staged))
    gone = []
    for key in entries:
        job_id = key[len(FINISHED) + 21:].decode()
        batch.delete(key)
        if _forget(batch, job_id):
            gone.append(job_id)
    _forget_history(batch, gone)
    return len(entries)


def _sweep_rejected(batch: Batch, cutoff_us: int, staged: list[bytes]) -> int:
    """Remove up to SWEEP_LIMIT rejected submits' entries older than ``cutoff_us``; how many."""
    if cutoff_us <= 0:
        return 0
    gone = expired(batch, cutoff_us, staged, SWEEP_LIMIT)
    for key in gone:
        batch.delete(key)
    return len(gone)


def _expired(batch: Batch, bound: bytes, candidates: list[bytes]) -> Iterator[bytes]:
    """The first SWEEP_LIMIT retention entries below ``bound``, committed and staged (among ``candidates``), in
    key order."""
    changes = batch.changes
    staged = sorted(key for key in candidates if key < bound and changes.get(key) is not None)
    committed = (key for key in batch.store.keys(FINISHED) if batch.changes.get(key, b"") is not None)
    n, merged = 0, _merge(committed, iter(staged), bound)
    for key in merged:
        yield key
        n += 1
        if n >= SWEEP_LIMIT:
            return


def _merge(a: Iterator[bytes], b: Iterator[bytes], bound: bytes) -> Iterator[bytes]:
    x, y = next(a, None), next(b, None)
    while True:
        low = min((v for v in (x, y) if v is not None), default=None)
        if low is None or low >= bound:
            return
        yield low
        if x == low:
            x = next(a, None)
        if y == low:
            y = next(b, None)


def _forget(batch: Batch, job_id: str) -> bool:
    """Remove a finished job's keys but its history from the view; False if it is no longer finished."""
    job = batch.jobs.get(job_id)
    listed = batch.listed.get(job_id) if job_id in batch.listed else _committed(batch, job_id)
    if job is None:
        job = listed
    if job is None or STATUS_OF[job.state] not in LEAVES:
        return False
    if listed is not None:  # the catalog holds the committed record's entries and counts
        for key in listing_keys(listed):
            batch.delete(key)
        for key, delta in rolled_up({counter_key(listed.tenant_id, listed.task_type,
                                                 STATUS_OF[listed.state]): -1}).items():
            value = int(batch.get(key) or 0) + delta
            batch.put(key, b"%d" % value if value else None)
    batch.jobs.pop(job_id, None)
    batch.listed.pop(job_id, None)
    batch.job_cache.pop(job_id, None)
    batch.delete(k.job_key(job_id))
    for key in index_entries(job):
        batch.delete(key)
    _forget_labels(batch, job)
    batch.delete(k.tenant_job_key(job.tenant_id, job_id))
    batch.put(PRUNED, b"1")
    return True


def _forget_history(batch: Batch, job_ids: list[str]) -> None:
    """Delete the history index of ``job_ids``: committed entries, and staged ones (one pass over the batch)."""
    if not job_ids:
        return
    prefixes = tuple(k.history_prefix(job_id) for job_id in job_ids)
    doomed = [key for key in batch.changes if key[:2] == k.HISTORY and key.startswith(prefixes)]
    for prefix in prefixes:
        doomed += batch.store.keys(prefix)
    for key in doomed:
        batch.delete(key)


def _forget_labels(batch: Batch, job: JobView) -> None:
    raw = batch.get(LABELS + job.job_id.encode())
    if raw is None:
        return
    labels = dict(pair.split(SEP, 1) for pair in raw.split(b"\x1e"))
    for key in label_entries(job, {n.decode(): v.decode() for n, v in labels.items()}):
        batch.delete(key)
    batch.delete(LABELS + job.job_id.encode())


def _committed(batch: Batch, job_id: str) -> JobView | None:
    raw = batch.store.get(k.job_key(job_id))
    return decode_job(raw) if raw is not None else None
