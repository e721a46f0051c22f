"""A backtest: recorded submissions replayed through the engine's rules under other settings, in virtual time.

From a recorded log (every event of the jobs submitted in a window) this takes each job's
submission (time, tenant, task type, priority, due time, lane) and each attempt's recorded
outcome and how long it held its slot: from the decision that started it to the decision that
recorded its result, so the engine's own round trips (the transaction that commits the start,
the one that records the result) count as they did, not only the handler's run.
:func:`simulate` submits the same jobs at the same instants to a
:class:`~engine.testing.virtual.VirtualLoop` — the engine's own admission, lanes, fair queuing,
rate limits, retries — whose runner holds a slot for each attempt's recorded time instead of
calling a handler; :func:`compare` sets the recorded and the simulated waits (ready → first
start) and served shares side by side, per tenant and task type. ``epochq simulate`` is the
command (docs/testing.md, "Simulating other settings").

The engine's steps log every failed attempt, dead letter and refused submission, as a running
engine should; a replay of a day would print thousands of such lines, so the replay keeps them
quiet and counts what they would have said instead (``Simulated.failures``, :func:`failure_lines`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from engine.contract import messages as m
from engine.domain.decide import TaskPolicy
from engine.domain.lanes import Lane, lane_for
from engine.domain.ratelimits import limit_envelope
from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind, RunRequest, RunResult
from engine.testing.virtual import Setup, VirtualLoop

EMPTY = m.Payload(b"null")
Attempt = tuple[str, int]  # (outcome kind, duration µs)
MAX_PARTITIONS = 1024
"""The most job partitions a replay takes: each tick visits every partition, so its cost grows with them (200
jobs replayed in 0.45 s over one partition, 2.5 s over 100, 33 s over 1,000)."""
MAX_SLOTS = 100_000
"""The most slots a lane may be given across the cluster."""
WEIGHTS = (1e-6, 1e6)
"""The weights a tenant may be given, least and most."""
PER_JOB_LOGGERS = ("epochq.outcomes", "epochq.admit")
"""The engine's loggers of one line per failed attempt, dead letter or refused command: quiet during a replay."""


@dataclass
class RecordedJob:
    """One job as the log tells it: its submission, its attempts, its first start."""

    job_id: str
    tenant: str
    task_type: str
    priority: int
    lane: str
    max_attempts: int
    submitted_at: int
    run_at: int | None
    attempts: dict[int, Attempt] = field(default_factory=dict)  # attempt -> (outcome kind, slot held µs)
    first_start: int | None = None  # occurred_at of the first JobStarted
    ready_at: int | None = None  # that JobStarted's due_at: when the job could have started
    starts: list[int] = field(default_factory=list)  # every attempt's start
    errors: dict[int, str] = field(default_factory=dict)  # attempt -> its recorded error type, for a failed one

    @property
    def wait(self) -> int | None:
        """Ready → first start (µs), or None if it never started."""
        return None if self.first_start is None or self.ready_at is None else self.first_start - self.ready_at


def recorded_jobs(events: Iterable[m.Event], since: int | None = None, until: int | None = None) -> list[RecordedJob]:
    """The jobs submitted in ``[since, until)`` and what the log says happened to them, by submission time."""
    jobs: dict[str, RecordedJob] = {}
    for event in events:
        body, job = event.body, jobs.get(event.job_id or "")
        if isinstance(body, m.JobSubmitted) and body.parent_job_id is None and event.job_id \
                and (since is None or event.occurred_at >= since) and (until is None or event.occurred_at < until):
            jobs[event.job_id] = RecordedJob(event.job_id, event.tenant_id or "", body.task_type, body.priority,
                                             body.lane, body.max_attempts, event.occurred_at, body.run_at)
        elif job is not None:
            _take(job, event)
    return sorted(jobs.values(), key=lambda j: (j.submitted_at, j.job_id))


def _take(job: RecordedJob, event: m.Event) -> None:
    body = event.body
    if isinstance(body, m.JobStarted):
        job.starts.append(event.occurred_at)
        if job.first_start is None:
            job.first_start, job.ready_at = event.occurred_at, body.due_at
    elif isinstance(body, m.JobSucceeded):
        held = _held(job, body.attempt, event, body.duration_us)
        job.attempts[body.attempt] = (AttemptOutcomeKind.SUCCEEDED.value, held)
    elif isinstance(body, m.JobFailed):
        kind = AttemptOutcomeKind.FAILED if body.retryable else AttemptOutcomeKind.INVALID
        job.attempts[body.attempt] = (kind.value, _held(job, body.attempt, event, body.duration_us))
        job.errors[body.attempt] = body.error_type


def _held(job: RecordedJob, attempt: int, result: m.Event, duration_us: int) -> int:
    """How long the attempt held its slot: its start's decision to its result's (the handler's duration if
    the start is not in the log)."""
    if 0 < attempt <= len(job.starts):
        return max(duration_us, result.occurred_at - job.starts[attempt - 1])
    return duration_us


class RecordedRunner:
    """Holds a slot for each attempt's recorded duration, then reports its recorded outcome."""

    def __init__(self, jobs: Iterable[RecordedJob]):
        jobs = list(jobs)
        self.attempts = {j.job_id: j.attempts for j in jobs}
        self.errors = {j.job_id: j.errors for j in jobs if j.errors}
        self._heap: list[tuple[int, int, RunResult]] = []
        self._seq = itertools.count()
        self._running: Counter[Lane] = Counter()

    def start(self, request: RunRequest, now: int) -> None:
        """The attempt runs from ``now`` for its recorded duration."""
        kind, duration = self._recorded(request.job_id, request.attempt)
        error = self.errors.get(request.job_id, {}).get(request.attempt, "") if kind != "succeeded" else ""
        outcome = AttemptOutcome(AttemptOutcomeKind(kind), error_type=error, duration_us=duration,
                          retryable=kind == AttemptOutcomeKind.FAILED.value)
        heapq.heappush(self._heap, (now + max(0, duration), next(self._seq), RunResult(request, outcome)))
        self._running[request.lane] += 1

    def _recorded(self, job_id: str, attempt: int) -> Attempt:
        """The attempt's recorded outcome; past the recorded ones, the last recorded duration and success."""
        attempts = self.attempts.get(job_id) or {}
        if attempt in attempts:
            return attempts[attempt]
        last = attempts[max(attempts)][1] if attempts else 0
        return AttemptOutcomeKind.SUCCEEDED.value, last

    def finished(self, now: int) -> list[RunResult]:
        """The attempts whose recorded duration has run out by ``now``."""
        done = []
        while self._heap and self._heap[0][0] <= now:
            result = heapq.heappop(self._heap)[2]
            self._running[result.request.lane] -= 1
            done.append(result)
        return done

    def running(self, lane: Lane) -> int:
        """Attempts under way in ``lane``."""
        return self._running[lane]

    def next_finish(self) -> int | None:
        """When the next attempt under way ends."""
        return self._heap[0][0] if self._heap else None


@dataclass(frozen=True)
class Scenario:
    """The settings to replay under: lane slots (the whole cluster's), job partitions, tenants' weights and
    limits (``setup``), per task type rate limits (per second across the cluster, burst) and priorities, and
    the task types' policies (None: defaults)."""

    setup: Setup = field(default_factory=Setup)
    rates: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    priorities: Mapping[str, int] = field(default_factory=dict)
    policies: dict[str, TaskPolicy] | None = None


@dataclass
class Simulated:
    """What the replay did: each job's first start and wait, and every start, in virtual time; the attempts that
    failed, the jobs dead-lettered and the submissions refused, counted."""

    waits: dict[str, int] = field(default_factory=dict)
    starts: list[tuple[int, str]] = field(default_factory=list)  # (time, job id) of every attempt's start
    unstarted: int = 0
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)  # (task type, error type) -> attempts
    dead: Counter[str] = field(default_factory=Counter)  # task type -> jobs dead-lettered
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> submissions refused


def simulate(jobs: list[RecordedJob], scenario: Scenario) -> Simulated:
    """Submit ``jobs`` at their recorded instants under ``scenario`` and run until every one has ended."""
    if not jobs:
        return Simulated()
    with _per_job_lines_quiet():
        loop = _replayed(jobs, scenario)
    return _outcome(loop, {j.job_id: j.task_type for j in jobs})


def _replayed(jobs: list[RecordedJob], scenario: Scenario) -> VirtualLoop:
    loop = VirtualLoop(scenario.setup, jobs[0].submitted_at, RecordedRunner(jobs), scenario.policies, {},
                       decode=False)
    count = loop.count
    for task_type, (rate, burst) in sorted(scenario.rates.items()):
        body = m.SetRateLimit(task_type, rate, burst, "simulate", "simulate")  # each partition takes its share
        for p in range(count):
            loop.send(m.Command(f"rate-{task_type}-{p}", limit_envelope(task_type, p, count), "", loop.now, body))
    for job in jobs:
        loop.advance_to(job.submitted_at)
        loop.send(_resubmitted(job, scenario))
    loop.advance_to(jobs[-1].submitted_at)
    while (due := loop.next_due()) is not None:
        loop.advance_to(due)
    return loop


@contextmanager
def _per_job_lines_quiet() -> Iterator[None]:
    """The engine's per-job log lines (PER_JOB_LOGGERS) dropped while the block runs."""
    loggers = [logging.getLogger(name) for name in PER_JOB_LOGGERS]
    for logger in loggers:
        logger.addFilter(_drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(_drop)


def _drop(_record: logging.LogRecord) -> bool:
    return False


def _resubmitted(job: RecordedJob, scenario: Scenario) -> m.Command:
    priority = scenario.priorities.get(job.task_type, job.priority)
    pinned = job.lane if job.lane != lane_for(job.priority).value else None  # a lane not the priority's was asked for
    body = m.SubmitJob(job.task_type, EMPTY, priority, job.run_at, None, pinned, job.max_attempts)
    return m.Command(f"sim-{job.job_id}", job.job_id, job.tenant, job.submitted_at, body)


def _outcome(loop: VirtualLoop, types: dict[str, str]) -> Simulated:
    """What the replayed log says about the jobs of ``types`` (job id -> task type)."""
    out = Simulated()
    for logged in loop.log:
        event, body = logged.event, logged.event.body
        task_type = types.get(event.job_id or "")
        if task_type is None:
            continue
        if isinstance(body, m.JobStarted):
            out.starts.append((event.occurred_at, event.job_id))  # type: ignore[arg-type]
            out.waits.setdefault(event.job_id, event.occurred_at - body.due_at)  # type: ignore[arg-type]
        elif isinstance(body, m.JobFailed):
            out.failures[(task_type, body.error_type or "failed")] += 1
        elif isinstance(body, m.JobDeadLettered):
            out.dead[task_type] += 1
        elif isinstance(body, m.JobRejected):
            out.rejected[body.reason] += 1
    out.unstarted = len(types) - len(out.waits)
    return out


def failure_lines(sim: Simulated) -> list[str]:
    """One line per task type of what failed in the replay: attempts failed by error type, jobs dead-lettered;
    then one line of the submissions refused, by reason. None when nothing failed."""
    by_type: dict[str, Counter[str]] = defaultdict(Counter)
    for (task_type, error), n in sim.failures.items():
        by_type[task_type][error] += n
    lines = []
    for task_type in sorted(by_type.keys() | sim.dead.keys()):
        errors = by_type.get(task_type, Counter())
        parts = [f"{sum(errors.values())} attempt(s) failed ("
                 + ", ".join(f"{error} {n}" for error, n in _most_first(errors)) + ")"] if errors else []
        if sim.dead[task_type]:
            parts.append(f"{sim.dead[task_type]} job(s) dead-lettered")
        lines.append(f"{task_type}: " + ", ".join(parts))
    if sim.rejected:
        lines.append("submissions refused: " + ", ".join(f"{why} {n}" for why, n in _most_first(sim.rejected)))
    return lines


def _most_first(counts: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class Row:
    """One (tenant, task type): its jobs, recorded and simulated waits (ms) and served shares (fractions)."""

    tenant: str
    task_type: str
    jobs: int
    recorded_p50_ms: float | None
    recorded_p99_ms: float | None
    simulated_p50_ms: float | None
    simulated_p99_ms: float | None
    recorded_share: float
    simulated_share: float


def compare(jobs: list[RecordedJob], sim: Simulated, until: int | None = None) -> list[Row]:
    """Per tenant and task type, recorded against simulated: wait p50/p99 and the share of the starts
    before ``until`` (the window's end; the last submission by default) that went to it."""
    end = until if until is not None else (jobs[-1].submitted_at if jobs else 0)
    groups: dict[tuple[str, str], list[RecordedJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.tenant, job.task_type)].append(job)
    of = {j.job_id: (j.tenant, j.task_type) for j in jobs}
    recorded_served = Counter(of[j.job_id] for j in jobs for at in j.starts if at <= end)
    simulated_served = Counter(of[job_id] for at, job_id in sim.starts if at <= end)
    rec_total, sim_total = sum(recorded_served.values()) or 1, sum(simulated_served.values()) or 1
    rows = []
    for key in sorted(groups):
        members = groups[key]
        recorded = [w for j in members if (w := j.wait) is not None]
        simulated = [sim.waits[j.job_id] for j in members if j.job_id in sim.waits]
        rows.append(Row(key[0], key[1], len(members), _ms(recorded, 50), _ms(recorded, 99), _ms(simulated, 50),
                        _ms(simulated, 99), recorded_served[key] / rec_total, simulated_served[key] / sim_total))
    return rows


def _ms(values: list[int], pct: int) -> float | None:
    """The ``pct``-th percentile (nearest rank) in ms, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)] / 1000
