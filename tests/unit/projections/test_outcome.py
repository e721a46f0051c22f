"""A job's outcome is folded from its own lifecycle: a refused command (anyone's) never rewrites it."""

from __future__ import annotations

from pathlib import Path

from engine.contract import messages as m
from engine.questions.waiting import decided
from engine.questions.history import LoggedEvent
from engine.questions.outcome import Outcome
from projections.batch import Batch
from engine.questions.jobs import row_of
from projections.evolve import fold
from projections.store import open_store
from projections.views.jobs import read_job
from tests.unit.factories import claim, event

SUBMITTED = m.JobSubmitted("echo", m.Payload(b"{}"), 5, "NORMAL", 3)
REFUSED = m.CommandRefused("CancelJob", "running", "tenant 'other' is not the job's tenant")


def lifecycle(refusal_tenant: str = "other") -> list[m.Event]:
    """A job that runs, is refused a foreign tenant's cancel while running, then completes."""
    return [claim(1), event(SUBMITTED), event(m.JobQueued("submitted")), event(m.JobStarted(1, 1_000)),
            event(REFUSED, tenant=refusal_tenant), event(m.JobSucceeded(1, 50, b'{"ok": true}'))]


def outcome_of(events: list[m.Event]) -> Outcome:
    outcome = Outcome("job-1", status="unknown")
    for offset, ev in enumerate(events):
        if ev.job_id is not None:
            outcome.apply(LoggedEvent(offset, ev))
    return outcome


def test_a_refused_command_leaves_the_jobs_outcome_fields_as_its_lifecycle_set_them() -> None:
    with_refusal, without = outcome_of(lifecycle()), outcome_of([e for e in lifecycle() if e.body is not REFUSED])
    assert with_refusal.status == "completed" and with_refusal.result == {"ok": True}
    for name in ("status", "error", "reason", "result", "attempts", "due_at", "task_type"):
        assert getattr(with_refusal, name) == getattr(without, name), name
    assert with_refusal.error is None and with_refusal.reason is None
    assert "CommandRefused" in [e.event.type for e in with_refusal.events]  # in the history only


def test_a_refusal_is_the_commands_answer_for_its_waiter() -> None:
    waiting = Outcome("job-1")
    waiting.apply(LoggedEvent(7, event(REFUSED)))
    assert decided(waiting) and waiting.status == "submitted" and waiting.error is None
    assert waiting.refusal == "CancelJob refused in state running: tenant 'other' is not the job's tenant"


def test_a_refusal_after_a_dead_letter_keeps_the_dead_reason() -> None:
    events = [claim(1), event(SUBMITTED), event(m.JobQueued("submitted")), event(m.JobStarted(1, 1_000)),
              event(m.JobFailed(1, "ValueError", "bad", 10)), event(m.JobDeadLettered("validation_failed", 1)),
              event(m.CommandRefused("RescheduleJob", "dead", "only a waiting job can be rescheduled"))]
    outcome = outcome_of(events)
    assert (outcome.status, outcome.reason, outcome.error) == ("dead", "validation_failed", "ValueError: bad")


def test_the_projection_folds_a_refusal_into_the_history_only(tmp_path: Path) -> None:
    refused, plain = tmp_path / "refused", tmp_path / "plain"
    for path, events in ((refused, lifecycle()), (plain, [e for e in lifecycle() if e.body is not REFUSED])):
        store = open_store(path)
        batch = Batch(store)
        for offset, ev in enumerate(events):
            fold(batch, ev, offset)
        batch.commit()
        job = read_job(store, "job-1")
        assert job is not None
        if path == refused:
            with_refusal = job, row_of(job, 0)
        else:
            without = job, row_of(job, 0)
        store.close()
    fields = ("state", "result", "errors", "dead_reason", "attempt", "finished_at", "tenant_id")
    assert [getattr(with_refusal[0], f) for f in fields] == [getattr(without[0], f) for f in fields]
    assert with_refusal[1].status == "completed" and with_refusal[1].error is None


FORGED_RESULT = b'{"forged": true}'


def forged_lives() -> dict[str, list[m.Event]]:
    """Lives of job-1 with a forged record at the right epoch (anyone with WRITE on the log, an old engine), each
    one the job's lifecycle forbids where the job stands: the owner's fold ignores it."""
    queued = [claim(1), event(SUBMITTED), event(m.JobQueued("submitted"))]
    done = [*queued, event(m.JobStarted(1, 1_000)), event(m.JobSucceeded(1, 50, b'{"ok": true}'))]
    return {
        "success for a queued job": [*queued, event(m.JobSucceeded(1, 5, FORGED_RESULT))],
        "cancel after it completed": [*done, event(m.JobCancelled("forged"))],
        "a second success": [*done, *[event(m.JobSucceeded(1, 5, FORGED_RESULT)) for _ in range(6)]],
        "start after it completed": [*done, event(m.JobStarted(2, 2_000))],
    }


def test_a_reader_folds_a_job_s_events_as_the_owner_does_and_counts_what_it_ignores(tmp_path: Path) -> None:
    for name, events in forged_lives().items():
        outcome = outcome_of(events)
        store = open_store(tmp_path / name.replace(" ", "-"))
        batch = Batch(store)
        verdicts = [fold(batch, ev, offset).status for offset, ev in enumerate(events)]
        batch.commit()
        job = read_job(store, "job-1")
        assert job is not None
        assert outcome.status == row_of(job, 0).status, name  # the reader and the owner's fold agree
        assert outcome.result != {"forged": True}, name
        assert outcome.ignored == verdicts.count("ignored") > 0, (name, verdicts)
        store.close()


def test_a_reader_that_starts_mid_life_applies_what_it_cannot_judge() -> None:
    outcome = Outcome("job-1")
    for offset, body in enumerate([m.JobStarted(1, 1_000), m.JobSucceeded(1, 50, b"1")]):
        outcome.apply(LoggedEvent(offset, event(body)))
    assert (outcome.status, outcome.result, outcome.ignored) == ("completed", 1, 0)
