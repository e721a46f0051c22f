"""The orphans step's split: attempts out with a remote pool are adopted by the new owner, in-process ones re-queued.
Pure."""

from __future__ import annotations

from dataclasses import replace

from engine.domain.decide import CommandInput, StartAttempt
from engine.domain.fence import fencing_token
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.domain.remote import attempt_pool
from engine.runtime.loop.orphans import adopt, adoption
from engine.runtime.remote.leases import Leases
from tests.unit.factories import DECIDE_CTX, decided, submit

POOLS = {"render": "gpu"}


def running(job_id: str, task_type: str, epoch: int = 1) -> JobView:
    ctx = replace(DECIDE_CTX, tasks=None, epoch=epoch)  # any task type
    job, _ = decided(None, CommandInput(submit(task_type=task_type), 1), ctx)
    job, _ = decided(job, StartAttempt("job-1", "w", 0, POOLS.get(task_type, "")), ctx)
    assert job is not None and job.state is JobState.RUNNING
    return replace(job, job_id=job_id)


def test_remote_attempts_are_adopted_and_in_process_ones_left_to_the_re_queue() -> None:
    jobs = {"r": running("r", "render"), "l": running("l", "email.send"), "q": replace(running("q", "render"),
                                                                                          state=JobState.QUEUED)}
    requeue, adopted = adopt([("r", 1), ("l", 1), ("q", 1), ("gone", 1)], jobs.get, recorded_pool)
    assert [j.job_id for j in adopted] == ["r"]
    assert requeue == [("l", 1), ("q", 1), ("gone", 1)]  # what the orphan rule decides as before (or ignores)


def recorded_pool(job: JobView) -> str | None:
    return attempt_pool(job, POOLS.get)


def test_the_new_owner_adopts_by_the_pool_the_start_recorded_not_by_its_own_catalog() -> None:
    dispatched = running("r", "render")  # its start recorded pool gpu
    local = replace(running("l", "email.send"), task_type="render")  # ran in process; render is gpu's now
    before_v7 = replace(running("o", "render"), pool=None)  # a start written before v7: the catalog decides
    jobs = {"r": replace(dispatched, task_type="email.send"), "l": local, "o": before_v7}
    requeue, adopted = adopt([("r", 1), ("l", 1), ("o", 1)], jobs.get, recorded_pool)
    assert [j.job_id for j in adopted] == ["r", "o"] and requeue == [("l", 1)]
    assert [recorded_pool(j) for j in jobs.values()] == ["gpu", None, "gpu"]


def test_an_adopted_lease_is_the_new_owner_s_and_renewed_by_the_token_of_the_epoch_the_attempt_started_at() -> None:
    job = replace(running("r", "render", epoch=3), epoch=5)  # the owner at epoch 6 finds it; 5 wrote for it since
    request, token = adoption(2, 6, job, 100.0)
    assert (request.partition, request.epoch, request.attempt, request.job_id) == (2, 6, 1, "r")  # its lapse counts
    assert token == fencing_token(3, 1)  # what the worker's heartbeats and result carry


def test_the_adopted_lease_is_renewed_by_the_worker_s_token_and_lapses_without_it() -> None:
    now = [100.0]
    leases = Leases(clock=lambda: now[0])
    request, token = adoption(0, 4, running("r", "render", epoch=3), now[0])
    leases.grant(request, "gpu", 3.0, token)  # a full lease from the adoption
    now[0] = 102.0
    assert not leases.renew("r", fencing_token(4, 1))  # the new owner's epoch is not the attempt's token
    assert leases.renew("r", fencing_token(3, 1))  # the worker's heartbeat
    now[0] = 104.5
    assert leases.expire() == []
    now[0] = 105.1
    [lapsed] = leases.expire()
    assert lapsed.outcome.error_type == "lease_expired" and lapsed.request.epoch == 4  # decided by the new owner
