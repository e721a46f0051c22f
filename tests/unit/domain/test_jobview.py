"""JobView's compiled replace gives what dataclasses.replace gives, for any set of fields."""

from __future__ import annotations

import dataclasses
import random

import pytest

from engine.contract import messages as m
from engine.domain.jobs import AttemptError, JobView, replace
from engine.domain.lifecycle import JobState
from engine.errors import IllegalStateError

BASE = JobView("job-1", "acme", "email.send", JobState.QUEUED, 5, "NORMAL", 3,
               m.Payload(b"{}", "application/json", None, None), 10, 20, 1)
NEW_VALUES = {
    "job_id": "job-2", "tenant_id": "beta", "task_type": "x", "state": JobState.RUNNING, "priority": 9,
    "lane": "HIGH", "max_attempts": 7, "payload": m.Payload(b"[]", "application/json", "s", 2),
    "submitted_at": 11, "updated_at": 21, "epoch": 4, "idempotency_key": "k", "attempt": 2, "due_at": 99,
    "queued_at": 30, "started_at": 40, "finished_at": 50, "result": b"ok",
    "errors": (AttemptError(1, "E", "boom", "tb", 5, 6),), "dead_reason": "r", "replays": 1, "scope": "global",
    "parent_job_id": "p", "children": (("t", "c", "pending", ""),), "cancel": ("why", "ops"),
    "progress": (0.5, "half"), "depends_on": {"a": "run"}, "reported": 1,
    "dependents": ("d",), "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "requeued": 1,
    "lost": 1, "started_epoch": 3, "pool": "gpu",
}


def test_every_field_has_a_new_value_here():
    assert set(NEW_VALUES) == {f.name for f in dataclasses.fields(JobView)}


@pytest.mark.parametrize("seed", range(40))
def test_replace_matches_dataclasses_replace(seed):
    rng = random.Random(seed)
    names = rng.sample(sorted(NEW_VALUES), rng.randint(0, len(NEW_VALUES)))
    rng.shuffle(names)
    changes = {name: NEW_VALUES[name] for name in names}
    got = replace(BASE, **changes)
    assert got == dataclasses.replace(BASE, **changes)
    assert got is not BASE and BASE == JobView(*(getattr(BASE, f.name) for f in dataclasses.fields(JobView)))


def test_the_copy_stays_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        replace(BASE, attempt=1).attempt = 2  # type: ignore[misc]


def test_an_unknown_field_is_named():
    with pytest.raises(IllegalStateError, match="no field.*colour"):
        replace(BASE, colour="red")


def test_a_stored_record_from_before_the_cancel_field_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, cancel=("why", "ops"))
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-10], 2)  # as written before the cancel field
    assert decode_job(older) == BASE


def test_a_stored_record_from_before_dependencies_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, depends_on={"a": "run"}, reported=1, dependents=("d",))
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-8], 2)  # the record as a release before both wrote it
    assert decode_job(older) == BASE


def test_a_stored_record_from_before_the_traceparent_field_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, traceparent=NEW_VALUES["traceparent"])
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-5], 2)
    assert decode_job(older) == BASE


def test_a_stored_record_from_before_the_requeued_count_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, attempt=3, requeued=2)
    assert decode_job(encode_job(record)) == record and record.counted_attempts() == 1
    older = marshal.dumps(marshal.loads(encode_job(record))[:-4], 2)
    assert decode_job(older) == replace(BASE, attempt=3)


def test_a_stored_record_from_before_the_lost_count_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, attempt=2, requeued=1, lost=1)
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-3], 2)
    assert decode_job(older) == replace(BASE, attempt=2, requeued=1)


def test_a_stored_record_from_before_the_started_epoch_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, started_epoch=3)
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-2], 2)
    assert decode_job(older) == BASE and BASE.started_epoch is None


def test_a_stored_record_from_before_the_pool_still_decodes() -> None:
    import marshal

    from projections.views.jobs import decode_job, encode_job

    record = replace(BASE, pool="gpu")
    assert decode_job(encode_job(record)) == record
    older = marshal.dumps(marshal.loads(encode_job(record))[:-1], 2)
    assert decode_job(older) == BASE and BASE.pool is None
