"""Fuzzing commands through decode and decide (Hypothesis): nothing a producer sends can make them raise.

- decode: any bytes (valid records mutated, truncated, spliced; any body after a valid header)
  either become a Command or raise DecodeError;
- decide (and decide_schedule for schedule commands): never raises for any decodable command
  and any job, every event it emits can be encoded, and what it admits satisfies every rule of
  engine.contract.validation and can be folded, indexed and ordered in the ready queue.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from engine.contract import messages as m
from engine.contract.codec import MAGIC, catalog, decode_command, encode_command, encode_event
from engine.contract.validation import MAX_AHEAD_US, SUBMIT_LANES, check_submit
from engine.domain.decide import CommandInput, DecideContext, Emit, Limits, TaskPolicy, decide
from engine.domain.fairness import within_tenant_key
from engine.domain.jobs import JobView, evolve
from engine.domain.lifecycle import JobState
from engine.domain.retry import RetryPolicy
from engine.domain.schedules import ScheduleContext, ScheduleView, decide_schedule, is_schedule_command
from engine.errors import DecodeError
from projections.views.indexes import index_entries

NOW = 1_800_000_000_000_000
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- values: valid, edge, absurd ------------------------------------------------------------

INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
EDGES = st.sampled_from([-2**63, -1, 0, 1, NOW - 1, NOW, NOW + MAX_AHEAD_US, NOW + MAX_AHEAD_US + 1, 2**63 - 1])
TIMES = st.one_of(EDGES, INT64, st.integers(0, 2 * NOW))
NAMES = st.one_of(
    st.sampled_from(["acme", "beta", "email.send", "job-1", "nightly", "schedule:nightly", "product:pro", "global",
                     "tenant", "batch", "DEAD", "", " ", " acme", "a\x1fb", "\x00", "\u200facme", "x" * 256]),
    st.text(max_size=12), st.text(min_size=195, max_size=260),
)
TEXT = st.one_of(NAMES, st.text(max_size=1200))
OPTIONAL = st.none() | NAMES
PAYLOADS = st.builds(m.Payload, st.binary(max_size=64) | st.just(b"x" * 70), NAMES, st.text(max_size=8), INT32)
LABELS = st.dictionaries(NAMES, TEXT, max_size=3) | st.just({f"k{i}": "" for i in range(65)})

SUBMITS = st.builds(
    m.SubmitJob, NAMES, PAYLOADS, st.integers(0, 9) | INT32, st.none() | TIMES, OPTIONAL, OPTIONAL,
    st.none() | st.integers(-1, 1001) | INT32, LABELS, OPTIONAL, OPTIONAL,
)
BODIES = st.one_of(
    SUBMITS,
    st.builds(m.CancelJob, TEXT, TEXT),
    st.builds(m.ReplayDeadJob, TEXT, TEXT),
    st.builds(m.ReportChild, NAMES, NAMES, NAMES, st.sampled_from(["completed", "dead", "bogus"]) | TEXT, TEXT),
    st.builds(m.RescheduleJob, TIMES, TEXT),
    st.builds(m.UpsertSchedule, NAMES, NAMES, NAMES, st.sampled_from(["* * * * *", "0 0 30 2 *", "@hourly", "x"]),
              PAYLOADS, st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", "../etc", ""]), INT32,
              st.booleans(), NAMES, INT32, NAMES),
    st.builds(m.PauseSchedule, NAMES, TEXT),
    st.builds(m.ResumeSchedule, NAMES, TEXT),
    st.builds(m.RemoveSchedule, NAMES, TEXT),
    st.builds(m.ReportOccurrence, NAMES, TIMES, NAMES, NAMES),
)


GOOD_NAMES = st.sampled_from(["acme", "beta", "t-1", "job-1"]) | st.text(
    st.characters(categories=["L", "N"]), min_size=1, max_size=20)
GOOD_SUBMITS = st.builds(
    m.SubmitJob, st.sampled_from(["email.send", "noop"]), st.builds(m.Payload, st.binary(max_size=32)),
    st.integers(0, 9), st.none() | st.integers(0, NOW + MAX_AHEAD_US), st.none(),
    st.none() | st.sampled_from(["HIGH", "normal", "low", "BATCH"]), st.none() | st.integers(1, 1000),
    st.dictionaries(GOOD_NAMES, GOOD_NAMES, max_size=2), st.none() | st.just("tenant"), st.none(),
)
ABSURD = {  # one field of an otherwise valid SubmitJob, set to what a careless or hostile producer sends
    "task_type": NAMES, "payload": PAYLOADS, "priority": INT32, "run_at": TIMES, "idempotency_key": NAMES,
    "lane": NAMES, "max_attempts": INT32, "labels": LABELS, "scope": NAMES, "parent_job_id": NAMES,
}


@st.composite
def near_valid(draw: st.DrawFn) -> m.Command:
    """A valid SubmitJob with at most one field (of the body or the envelope) made absurd."""
    body, field = draw(GOOD_SUBMITS), draw(st.sampled_from(["none", "job_id", "tenant_id", *ABSURD]))
    if field in ABSURD:
        body = replace(body, **{field: draw(ABSURD[field])})
    job_id = draw(NAMES) if field == "job_id" else draw(GOOD_NAMES)
    tenant = draw(NAMES) if field == "tenant_id" else draw(GOOD_NAMES)
    return m.Command("c-1", job_id, tenant, NOW, body)


@st.composite
def commands(draw: st.DrawFn) -> m.Command:
    """A command as a producer might send it: the job id often the schedule envelope its body names."""
    body = draw(BODIES)
    sid = getattr(body, "schedule_id", None)
    job_id = draw(st.just(f"schedule:{sid}") | NAMES) if sid is not None else draw(NAMES)
    return m.Command(draw(NAMES), job_id, draw(NAMES), draw(TIMES), body, draw(OPTIONAL))


VALID = m.Command("c-1", "job-1", "acme", NOW, m.SubmitJob("email.send", m.Payload(b'{"to":"a@b.c"}'), 5, NOW + 10,
                                                           None, "batch", 3, {"k": "v"}, None, None))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """The bytes of a command, then flipped, truncated, cut out, spliced with junk or each other."""
    raw = bytearray(encode_command(draw(commands() | near_valid() | st.just(VALID))))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["flip", "truncate", "cut", "insert"]))
        if kind == "flip" and at < len(raw):
            raw[at] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del raw[at:]
        elif kind == "cut":
            del raw[at:at + draw(st.integers(1, 8))]
        else:
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


HEADERS = st.sampled_from([v.header for v in catalog("command").versions])
RAW = st.one_of(mutated(), st.binary(max_size=64), st.builds(lambda h, b: h + b, HEADERS, st.binary(max_size=200)),
                st.builds(lambda b: MAGIC + b, st.binary(max_size=12)))

# --- jobs and contexts ------------------------------------------------------------------------

CHILDREN = st.lists(st.tuples(NAMES, NAMES, st.sampled_from(["pending", "completed", "dead"]), st.just("")),
                    max_size=3).map(tuple)
JOBS = st.none() | st.builds(
    JobView, NAMES, NAMES, NAMES, st.sampled_from(list(JobState)), st.integers(0, 9),
    st.sampled_from(["HIGH", "NORMAL", "LOW", "BATCH", "DEAD"]), st.integers(1, 5), PAYLOADS,
    st.integers(0, NOW), st.integers(0, NOW), st.integers(0, 3), idempotency_key=OPTIONAL,
    attempt=st.integers(0, 5), due_at=st.none() | st.integers(0, 2 * NOW), children=CHILDREN,
    parent_job_id=OPTIONAL,
)
CONTEXTS = st.builds(
    DecideContext, st.just(NOW), st.integers(1, 3), st.sampled_from([64, 512 * 1024]),
    st.none() | st.just({"email.send": TaskPolicy(RetryPolicy(3)), "noop": TaskPolicy(lane="BATCH")}),
    limits=st.builds(Limits, st.integers(0, 5), st.none() | st.integers(0, 5), st.integers(0, 5),
                     st.none() | st.integers(0, 5)),
    scope_tenants=st.lists(NAMES, max_size=3).map(tuple),
)
SCHEDULE = ScheduleView("nightly", "acme", "email.send", "0 3 * * *", "UTC", m.Payload(b"{}"), 5, True, "skip", 10,
                        "first", 0, 0, 0, armed=NOW - 1)

# --- properties -------------------------------------------------------------------------------


def _decodable(raw: bytes) -> m.Command | None:
    try:
        return decode_command(raw)
    except DecodeError:
        return None


@FUZZ
@given(RAW)
def test_decode_returns_a_command_or_raises_decode_error(raw: bytes) -> None:
    try:
        command = decode_command(raw)
    except DecodeError:
        return
    assert isinstance(command, m.Command)


@FUZZ
@given(commands() | near_valid())
def test_every_command_a_producer_can_encode_decodes_to_itself(command: m.Command) -> None:
    assert decode_command(encode_command(command)) == command


@FUZZ
@given(commands() | near_valid() | mutated().map(_decodable), JOBS, CONTEXTS, st.integers(0, 2**40))
def test_decide_never_raises_and_every_event_it_decides_can_be_written(
        command: m.Command | None, job: JobView | None, ctx: DecideContext, offset: int) -> None:
    assume(command is not None)
    assert command is not None
    if is_schedule_command(command):  # the engine hands these to the schedule desk
        for view in (None, SCHEDULE):
            _encodable(decide_schedule(view, CommandInput(command, offset), ScheduleContext(NOW, ctx.tasks, 64)))
        return
    out = decide(job if job is None else replace(job, job_id=command.job_id), CommandInput(command, offset), ctx)
    _encodable(out)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_valid(), st.sampled_from([None, {"email.send": TaskPolicy(), "noop": TaskPolicy()}]))
def test_what_decide_admits_satisfies_every_rule_and_can_be_folded(
        command: m.Command, tasks: dict[str, TaskPolicy] | None) -> None:
    ctx = DecideContext(NOW, 1, 512 * 1024, tasks)
    out = decide(None, CommandInput(command, 7), ctx)
    for emit in out:
        if isinstance(emit, Emit) and isinstance(emit.body, m.JobSubmitted):
            _admitted(command, emit, out, ctx)


def _encodable(out: list) -> None:  # type: ignore[type-arg]
    """Every event decided can be written (and every command sent can be produced)."""
    for item in out:
        if isinstance(item, Emit):
            encode_event(m.Event("e-1", item.job_id, item.tenant_id, 1, "fuzz", NOW, item.body))
        else:
            encode_command(item.command)


def _admitted(command: m.Command, submitted: Emit, out: list, ctx: DecideContext) -> None:  # type: ignore[type-arg]
    """An admitted job satisfies every rule, and can be folded, indexed and ordered."""
    check_submit(command, ctx.now, ctx.max_payload_bytes)
    assert submitted.job_id == command.job_id and command.job_id
    job = None
    for emit in out:
        if isinstance(emit, Emit) and emit.job_id == command.job_id:
            job = evolve(job, m.Event("e", emit.job_id, emit.tenant_id, ctx.epoch, "fuzz", ctx.now, emit.body))
    assert job is not None and job.state in (JobState.QUEUED, JobState.SCHEDULED, JobState.RUNNING,
                                             JobState.COMPLETED)  # a scoped job with no tenants: settled
    for name, longest in ((job.job_id, 255), (job.tenant_id, 200), (job.task_type, 200)):  # the rules, restated
        assert 0 < len(name) <= longest and name.isprintable() and name.strip(" ") == name
    assert 0 <= (job.due_at if job.due_at is not None else 0) <= ctx.now + MAX_AHEAD_US
    assert 0 <= job.priority <= 9 and job.lane in SUBMIT_LANES and 1 <= job.max_attempts <= 1000
    assert len(job.payload.data) <= ctx.max_payload_bytes
    index_entries(job)
    within_tenant_key(job.priority, job.due_at if job.due_at is not None else ctx.now, job.submitted_at)
