"""One loop, driven two ways: recorded inputs through the engine's core give the events TestEngine gave.

TestEngine runs a scenario (two tenants sharing one slot, a delayed job, a retried one, a cancel) and
its inputs are recorded: the command records read at each instant of its virtual clock, and each
attempt's outcome. The same inputs then go through a core made with the engine's rules (the admit
budget, the engine's owner) and ports that behave as the engine's do: a transaction ends a tick
after it began (the commit thread), an attempt's result arrives a tick after it started (the
executor). The events must be the same: per job, the same types and bodies in the same order, and
the jobs started in the same order.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from engine import App, JobContext, RetryPolicy
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.domain.decide import DecideContext
from engine.runtime.execution.verdicts import AttemptOutcome, RunRequest, RunResult
from engine.runtime.loop import core
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.core import Applied, Core, Read, Rules
from engine.runtime.loop.deciding import Decided
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Offsets, Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.route import Routed
from engine.runtime.loop.written import Written
from engine.testing import TestEngine
from engine.testing.store import MemoryStore
from engine.testing.virtual import OWNER, WINDOWS, MemoryRecord

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
Instant = tuple[int, list[bytes]]


def scenario_app() -> App:
    app = App()

    @app.task("mail.send")
    def send(ctx: JobContext, payload: dict) -> dict:
        return {"sent": payload["n"]}

    @app.task("pay.capture", retry=RetryPolicy(max_attempts=3, base_delay=30, max_delay=30))
    def capture(ctx: JobContext, payload: dict) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("gateway down")

    return app


def recorded_run() -> tuple[list[Instant], dict[tuple[str, int], AttemptOutcome], list[m.Event]]:
    """The scenario through TestEngine: the commands read per instant, each attempt's outcome, the events."""
    instants: list[Instant] = []
    outcomes: dict[tuple[str, int], AttemptOutcome] = {}
    with TestEngine(scenario_app(), start=START, lane_slots={"NORMAL": 1}, weights={"a": 1, "b": 2}) as t:
        loop = t._loop
        read, finished = loop.read, loop.runner.finished

        def recording_read() -> Read:
            got = read()
            raws = [record.value() for _, record in got.commands]  # type: ignore[attr-defined]
            if not instants or instants[-1][0] != loop.now:
                instants.append((loop.now, []))
            instants[-1][1].extend(raws)
            return got

        def recording_finished(now: int) -> list[RunResult]:
            results = finished(now)
            outcomes.update({(r.request.job_id, r.request.attempt): r.outcome for r in results})
            return results

        loop.read = recording_read  # type: ignore[method-assign]
        loop.runner.finished = recording_finished  # type: ignore[method-assign]
        for n in range(3):
            t.submit("mail.send", {"n": n}, tenant="a")
            t.submit("mail.send", {"n": n}, tenant="b")
        t.submit("pay.capture", None, tenant="a")
        later = t.submit("mail.send", {"n": 9}, tenant="b", delay=600)
        t.run_until_idle()
        t.cancel(later.job_id)
        t.submit("mail.send", {"n": 10}, tenant="a", delay=5)
        t.advance(minutes=20)
        return instants, outcomes, t.events()


class EnginePorts:
    """Ports that behave as the engine's: a transaction ends one tick after it began; a result arrives one tick
    after its attempt started; the clock stands at each recorded instant."""

    def __init__(self, outcomes: dict[tuple[str, int], AttemptOutcome]):
        self.now = 0
        self.outcomes = outcomes
        self.commands: list[bytes] = []
        self.read_at = 0
        self.log: list[m.Event] = []
        self.next_event = 0
        self.running: list[RunResult] = []  # started; their results arrive at the next read
        self.committing: list[Written] = []  # begun; they end at the next read
        self.quiet = True
        self.tag = 0
        self.partition: Partition

    def clock(self) -> int:
        return self.now

    def read(self) -> Read:
        for w in self.committing:
            w.future.set_result(None)  # type: ignore[union-attr]
        results, self.running = self.running, []
        records = [(self.tag, MemoryRecord(0, at, self.commands[at]))
                   for at in range(self.read_at, len(self.commands))]
        self.read_at = len(self.commands)
        self.quiet = not (results or records or self.committing)
        self.committing = []
        return Read(records, results)

    def hold(self, read: Read, now: int) -> None:
        pass

    def routed(self, routed: Routed) -> None:
        for rewind in routed.rewinds:  # read before the partition was active: read again (the engine seeks)
            self.tag += 1
            self.read_at = rewind.offset
            self.partition.rewound(self.tag)

    def finished(self, ended: list[Written]) -> None:
        pass

    def applied(self, applied: Applied, now: int) -> None:
        self.applied_last = applied

    def start(self, starts: list[RunRequest]) -> None:
        self.running += [RunResult(r, self.outcomes[(r.job_id, r.attempt)]) for r in starts]

    def progress(self) -> list[tuple[RunRequest, float | None, str]]:
        return []

    def decided(self, decided: Decided) -> None:
        pass

    def write(self, work: list[tuple[Partition, Staged]]) -> list[Written]:
        begun = []
        for partition, staged in work:
            first = self.next_event
            self.log += [decode_event_at(raw, "x.events", 0, first + i) for i, raw in enumerate(staged.raws)]
            n = len(staged.events)
            self.next_event += n + 1 if n else 0
            self.commands += [encode(c) for c in staged.commands]
            written = Written(partition, staged, first=first if n else None, last=first + n - 1 if n else None,
                              future=Future())
            begun.append(written)
        self.committing += begun
        return begun

    def settle(self, taking: bool, now: int) -> None:
        pass

    def timed(self, apply_s: float, decide_s: float, write_s: float) -> None:
        pass


def encode(command: m.Command) -> bytes:
    from engine.contract.codec import encode_command

    return encode_command(command)


def replayed(instants: list[Instant], outcomes: dict[tuple[str, int], AttemptOutcome], app: App) -> list[m.Event]:
    """The recorded inputs through a core made with the engine's rules, on ports that behave as the engine's."""
    ports = EnginePorts(outcomes)
    base = DecideContext(0, 0, 512 * 1024, app.policies())
    board, poison = BreakerBoard({}), PoisonDesk(lambda job_id: None)
    weights = {"a": 1.0, "b": 2.0}
    rules = Rules("x.commands", 1, base, OWNER, {}, lambda t: weights.get(t, 1.0), lambda t: None, lambda s: ())
    slots = {"NORMAL": 1}
    the_core = Core(core.decider(rules, board, poison, lambda lane: slots.get(lane.value, 0) - len(ports.running)),
                    timeout_of=lambda task_type: 60.0)
    ports.applied = lambda applied, now: activate(the_core, applied, now, board, poison)  # type: ignore[method-assign]
    partition = ports.partition = the_core.partitions[0] = Partition(0, OWNER)
    partition.open(MemoryStore(), None)  # type: ignore[arg-type]
    partition.move(State.RESTORING)
    partition.stands(Offsets(next_event=0))
    ports.now = instants[0][0]
    core.claim(partition, ports.now)
    for now, raws in instants:
        ports.now = now
        ports.commands += raws
        while core.tick(the_core, ports) or not ports.quiet:
            pass
    return ports.log


def activate(the_core: Core, applied: Applied, now: int, board: BreakerBoard, poison: PoisonDesk) -> None:
    if applied.step.next.value == "activate":
        the_core.timers[0] = core.activate(applied.written.partition, board, poison, WINDOWS, now).timers


def by_job(events: list[m.Event]) -> dict[str, list[tuple[str, Any]]]:
    jobs: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for e in events:
        if e.job_id:
            jobs[e.job_id].append((type(e.body).__name__, e.body))
    return dict(jobs)


def test_recorded_inputs_through_the_engines_core_give_the_events_test_engine_gave() -> None:
    instants, outcomes, expected = recorded_run()
    got = replayed(instants, outcomes, scenario_app())
    assert by_job(got) == by_job(expected)
    starts = [e.job_id for e in expected if isinstance(e.body, m.JobStarted)]
    assert [e.job_id for e in got if isinstance(e.body, m.JobStarted)] == starts
    assert len(starts) == 9  # eight jobs ran, one of them twice; the cancelled one never did
