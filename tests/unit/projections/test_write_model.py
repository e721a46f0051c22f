"""The write model: what an owner's store keeps, tombstones of ended jobs, and their deterministic expiry."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest
from hypothesis import given, settings

from engine.contract import messages as m
from engine.domain.decide import CommandInput, DecideContext, Send, decide
from engine.domain.lifecycle import JobState
from projections.batch import Batch
from projections.evolve import FULL, WRITE_MODEL, fold, write_model
from projections.profile import Profile
from projections.store import open_store
from projections.views.ended import SWEEP_EVERY_US, ended_key, read_ended
from projections.views.jobs import read_job
from tests.unit.factories import claim, command, event, submit
from tests.unit.histories import KEY, STEPS, life, simulate

def fold_all(path: Path, events: list[m.Event], profile: Profile = WRITE_MODEL) -> Batch:
    batch = Batch(open_store(path), profile=profile)
    for offset, ev in enumerate(events):
        fold(batch, ev, offset)
    batch.commit()
    return batch


def keys(batch: Batch) -> list[bytes]:
    return [key for key, _ in batch.store.items()]


def test_an_ended_job_leaves_only_its_tombstone(tmp_path: Path) -> None:
    batch = fold_all(tmp_path / "s", [claim(1), *life()])
    assert read_job(batch, "job-1") is None
    tomb = read_ended(batch, "job-1")
    assert tomb is not None and tomb.state is JobState.COMPLETED and tomb.idempotency_key == KEY
    assert tomb.tenant_id == "acme" and tomb.finished_at == 1_002
    prefixes = {key[:2] for key in keys(batch)}
    assert not prefixes & {b"j:", b"h:", b"t:", b"i:", b"Ls", b"Cs", b"Ct"}
    assert b"m:tindex" not in keys(batch) and b"m:lindex" not in keys(batch)


def test_the_full_profile_still_keeps_everything(tmp_path: Path) -> None:
    batch = fold_all(tmp_path / "s", [claim(1), *life()], FULL)
    job = read_job(batch, "job-1")
    assert job is not None and job.state is JobState.COMPLETED
    assert {b"h:", b"t:", b"Ls", b"Cs"} <= {key[:2] for key in keys(batch)}


def test_a_duplicate_of_an_ended_job_is_answered_from_its_tombstone(tmp_path: Path) -> None:
    batch = fold_all(tmp_path / "s", [claim(1), *life()])
    tomb = read_ended(batch, "job-1")
    dup = decide(tomb, CommandInput(submit("job-1", key=KEY), 9), DecideContext(now=2_000, epoch=1))
    assert [type(e.body) for e in dup] == [m.DuplicateSubmitted]  # type: ignore[union-attr]
    cancel = decide(tomb, CommandInput(command("job-1", m.CancelJob("no", "ops")), 10), DecideContext(2_000, 1))
    refused = cancel[0].body  # type: ignore[union-attr]
    assert isinstance(refused, m.CommandRefused) and refused.state == "completed"


def test_a_late_dependent_is_told_from_the_tombstone_with_the_result_and_a_tombstone_of_old_reads_none(
        tmp_path: Path) -> None:
    events = life()
    events[-1] = event(m.JobSucceeded(1, 5, b'{"rows": 3}'), "job-1", at=1_002)
    batch = fold_all(tmp_path / "s", [claim(1), *events])
    tomb = read_ended(batch, "job-1")
    assert tomb is not None and tomb.result == b'{"rows": 3}'
    out = decide(tomb, CommandInput(command("job-1", m.AwaitJob("late")), 11), DecideContext(2_000, 1))
    (send,) = out
    assert isinstance(send, Send) and send.command.job_id == "late"
    assert send.command.body == m.ReportDependency("job-1", "completed", b'{"rows": 3}', "")
    old_shape = marshal.dumps(("completed", 5, "acme", None), 2)  # a tombstone written before results were kept
    batch.store.commit({ended_key("old"): old_shape}, batch.store.applied_offset(), indexed=False)
    old = read_ended(batch.store, "old")
    assert old is not None and old.state is JobState.COMPLETED and old.result is None


def test_a_tombstone_expires_by_event_time_after_the_window(tmp_path: Path) -> None:
    window_s = 60
    late = 1_002 + window_s * 1_000_000 + SWEEP_EVERY_US
    events = [claim(1), *life(), *life("job-2", at=late, key=None)]
    batch = fold_all(tmp_path / "s", events, write_model(window_s))
    assert read_ended(batch, "job-1") is None and batch.store.get(ended_key("job-2")) is not None
    assert not [key for key in keys(batch) if key.startswith(b"E:") and key.endswith(b"job-1")]


def test_a_window_of_zero_keeps_tombstones_for_ever(tmp_path: Path) -> None:
    events = [claim(1), *life(), *life("job-2", at=10**15, key=None)]
    batch = fold_all(tmp_path / "s", events, write_model(0))
    assert read_ended(batch, "job-1") is not None
    assert not [key for key in keys(batch) if key.startswith(b"E:")]


def test_an_id_submitted_again_after_the_window_is_a_new_job(tmp_path: Path) -> None:
    again = 10**13
    batch = fold_all(tmp_path / "s", [claim(1), *life(), *life(at=again)[:2]], write_model(60))
    job = read_job(batch, "job-1")
    assert job is not None and job.state is JobState.QUEUED and job.submitted_at == again
    assert read_ended(batch, "job-1") is None


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="dedup_window_s"):
        write_model(-1)


@settings(max_examples=40, deadline=None)
@given(STEPS)
def test_the_write_model_of_a_prefix_then_the_rest_equals_the_whole(steps: list[tuple[int, int]]) -> None:
    import tempfile

    events = simulate(steps)
    profile = Profile(True, 5)  # a tiny window: tombstones expire within the stream
    with tempfile.TemporaryDirectory() as tmp:
        whole = fold_all(Path(tmp) / "a", events, profile)
        split = len(events) // 2
        store = open_store(Path(tmp) / "b")
        for part, first in ((events[:split], 0), (events[split:], split)):
            batch = Batch(store, profile=profile)
            for offset, ev in enumerate(part, first):
                fold(batch, ev, offset)
            batch.commit()
        assert list(whole.store.items()) == list(store.items())
        whole.store.close()
        store.close()


def test_a_sweep_is_bounded_and_a_replay_in_other_batches_reaches_the_same_bytes(tmp_path: Path) -> None:
    from projections.views.ended import SWEEP_LIMIT

    window_s, n = 1, SWEEP_LIMIT + 100
    ended = [e for i in range(n) for e in life(f"job-{i}", at=1_000 + i, key=None)]
    late = 10**9
    tail = [*life("late-1", at=late, key=None), *life("late-2", at=late + 1, key=None)]
    events = [claim(1), *ended, *tail]
    whole = fold_all(tmp_path / "whole", events[:-7], write_model(window_s))  # one late event: one sweep, the limit
    assert sum(1 for key in keys(whole) if key.startswith(b"e:job-")) == n - SWEEP_LIMIT
    whole.store.close()
    whole = fold_all(tmp_path / "all", events, write_model(window_s))
    assert not [key for key in keys(whole) if key.startswith((b"e:job-", b"E:"))
                and b"late" not in key]  # the next event swept the rest
    store = open_store(tmp_path / "split")
    for first in range(0, len(events), 97):
        batch = Batch(store, profile=write_model(window_s))
        for offset, ev in enumerate(events[first:first + 97], first):
            fold(batch, ev, offset)
        batch.commit()
    assert list(store.items()) == list(whole.store.items())
    store.close()
    whole.store.close()


def test_a_waiting_jobs_reports_are_one_key_each_and_go_when_it_has_run(tmp_path: Path) -> None:
    from projections.views.dependencies import read_report, read_reports, report_key

    submitted = m.JobSubmitted("email.send", m.Payload(b"{}"), 5, "normal", 3, depends_on={"a": "cancel", "b": "run"})
    events = [claim(1), event(submitted, "job-1"), event(m.DependenciesAwaited(2), "job-1"),
              event(m.DependencyReported("b", "dead", None, "E: boom"), "job-1"),
              event(m.DependencyReported("a", "completed", b"7"), "job-1"),
              event(m.JobQueued("dependencies_met"), "job-1")]
    batch = fold_all(tmp_path / "s", events)
    job = read_job(batch, "job-1")
    assert job is not None and job.state is JobState.QUEUED and job.reported == 2 and job.awaiting() == 0
    assert read_reports(batch, job) == {"a": ("completed", b"7", ""), "b": ("dead", None, "E: boom")}
    assert read_report(batch, "job-1", "c") is None
    ran = [event(m.JobStarted(1, "w", 1), "job-1"), event(m.JobSucceeded(1, 5, None), "job-1")]
    for offset, ev in enumerate(ran, start=len(events)):
        fold(batch, ev, offset)
    batch.commit()
    assert batch.store.get(report_key("job-1", "a")) is None and batch.store.get(report_key("job-1", "b")) is None
