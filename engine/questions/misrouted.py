"""Where a job's records landed outside its own partition: the history index of the other stores.

A command produced to the wrong partition (not Java-compatible murmur2) is rejected
(``JobRejected`` with reason ``wrong_partition``) in the partition it landed in, because only
that partition's owner may write there; the job's own partition never hears of it. The
landed partition's store indexes that event under the job id like any other (its history
index, ``h:<job_id>``), so a reader that finds nothing in the job's own partition asks the
other stores of the state directory: one key-prefix seek per store, no log scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import Settings
from engine.questions.stores import partition_dirs, read_store
from projections.views import keys as k


@dataclass(frozen=True)
class Landed:
    """What one store other than the job's own indexed of the job: where its events are in that partition."""

    partition: int
    entries: list[tuple[int, str]]  # (offset, verdict) of each event of the job in ``partition``


def landed_elsewhere(settings: Settings, job_id: str, home: int) -> list[Landed]:
    """Every store of the state directory but ``home``'s that indexed events of ``job_id``, by partition."""
    out: list[Landed] = []
    prefix = k.history_prefix(job_id)
    for p, path in partition_dirs(settings):
        if p == home:
            continue
        try:
            with read_store(path) as store:
                entries = [(k.offset_of(key), v.decode()) for key, v in store.scan(prefix)]
        except Exception:  # noqa: BLE001 - a store being created, or not a store: it says nothing
            continue
        if entries:
            out.append(Landed(p, entries))
    return out
