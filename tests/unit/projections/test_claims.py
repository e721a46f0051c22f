"""A claim counts only as the successor of the valid one: a forged jump cannot fence the owner for good."""

from __future__ import annotations

from pathlib import Path

from engine.contract import messages as m
from engine.domain import fence
from engine.questions.history import with_fencing
from projections.batch import Batch
from projections.evolve import APPLIED, FENCED, current_epoch, fold
from projections.store import open_store
from projections.views.jobs import read_job
from tests.unit.factories import claim, event


def test_only_the_successor_claim_counts() -> None:
    assert fence.claim_counts(1, 0) and fence.claim_counts(6, 5)
    assert not fence.claim_counts(105, 5) and not fence.claim_counts(5, 5) and not fence.claim_counts(4, 5)


def test_a_forged_claim_far_ahead_neither_fences_the_owner_nor_blocks_the_next_one(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    batch = Batch(store)
    submitted = m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3)
    log = [claim(1), event(submitted, "job-1", epoch=1), claim(101, owner="mallory"),
           event(m.JobQueued("submitted"), "job-1", epoch=1), event(m.JobCancelled("forged"), "job-1", epoch=101,
                                                                    owner="mallory")]
    verdicts = [fold(batch, e, offset).status for offset, e in enumerate(log)]
    assert verdicts == [APPLIED, APPLIED, FENCED, APPLIED, FENCED]
    assert current_epoch(batch) == 1 and read_job(batch, "job-1").state.value == "queued"  # type: ignore[union-attr]
    assert fold(batch, claim(2, owner="owner-b"), 5).status == APPLIED  # the real successor still takes over
    history = list(with_fencing(enumerate(log), "job-1"))
    assert [h.fenced for h in history] == [False, False, True]  # history says the same as the fold


def test_a_full_fold_counts_every_record_it_does_not_apply_and_a_rebuild_counts_the_same(tmp_path: Path) -> None:
    from engine.contract.codec import encode_event
    from projections.profile import WRITE_MODEL
    from projections.restore import Restorer
    from projections.store import ASIDE_COUNTED
    from projections.views.aside import read_aside

    submitted = m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3)
    log = [claim(1), event(submitted, epoch=1), claim(101, owner="mallory"),  # a forged claim far ahead
           event(m.JobCancelled("forged"), epoch=7, owner="mallory"),  # outside the valid claim's epoch
           event(m.JobSucceeded(1, 5, b'"forged"'), epoch=1),  # the right epoch, but the job is not running
           event(m.JobQueued("submitted"), epoch=1)]
    records = [(offset, encode_event(e)) for offset, e in enumerate(log)] + [(len(log), b"not an event")]
    counts = []
    for name in ("a", "b"):
        store = open_store(tmp_path / name)
        restorer = Restorer(store, "ns.events", 0)
        restorer.feed(records)
        restorer.finish()
        counts.append(read_aside(store))
        assert store.get(ASIDE_COUNTED) == b"1"
        store.close()
    assert counts[0] == counts[1] == {"fenced_claim": 1, "fenced": 1, "ignored": 1, "poison": 0, "undecodable": 1}
    slim = open_store(tmp_path / "write-model")
    restorer = Restorer(slim, "ns.events", 0, profile=WRITE_MODEL)
    restorer.feed(records)
    restorer.finish()
    assert read_aside(slim) == dict.fromkeys(counts[0], 0)  # the owner's write model keeps no counts
    slim.close()


def test_a_reader_starting_mid_log_gets_the_newest_valid_claim_before_its_start_from_a_store(tmp_path: Path) -> None:
    from engine.questions.stores import claim_before

    store = open_store(tmp_path / "view")
    assert claim_before(store, 3) is None  # folded nothing: the reader stands in
    batch = Batch(store)
    submitted = m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3)
    log = [claim(1), event(submitted, epoch=1), claim(101, owner="mallory"), claim(2, owner="owner-b"),
           event(m.JobQueued("submitted"), epoch=2)]
    for offset, e in enumerate(log):
        fold(batch, e, offset)
    batch.commit()
    assert [claim_before(store, s) for s in (1, 3, 4, 5)] == [(1, 1), (3, 1), (4, 2), (5, 2)]  # never the forged 101
    assert claim_before(store, 9) == (5, 2)  # past what it folded: read from there, under its newest claim
    store.close()
