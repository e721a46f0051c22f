"""Small bounded questions the console asks of the state directory: jobs by id prefix, task types and their counts.

Read through the process's kept-open readers (engine.questions.readers), like the catalog.
"""

from __future__ import annotations

from engine.config import Settings
from engine.domain.jobs import JobView
from engine.questions.jobs import JobRow, row_of
from engine.questions.readers import READERS
from projections.views import keys as k
from projections.views.jobs import decode_job
from projections.views.listing import SEP, STATUSES

PREFIX_ROWS = 50
"""Jobs an id-prefix search returns at most."""


def jobs_with_id_prefix(settings: Settings, prefix: str, limit: int = PREFIX_ROWS) -> list[JobRow]:
    """The jobs whose id starts with ``prefix`` (an exact id is one), by id, at most ``limit`` of them."""
    rows: list[JobRow] = []
    for p, store in READERS.stores(settings):
        for n, (_, raw) in enumerate(store.scan(k.job_key(prefix))):
            if n >= limit:
                break
            job: JobView = decode_job(raw)
            rows.append(row_of(job, p))
    return sorted(rows, key=lambda r: r.job_id)[:limit]


def task_type_counts(settings: Settings) -> dict[str, dict[str, int]]:
    """Every task type the catalog has counted, with its jobs per status (summed over the partitions)."""
    out: dict[str, dict[str, int]] = {}
    for _, store in READERS.stores(settings):
        for key, value in store.scan(k.COUNT_TYPE):
            task_type, _, status = key[len(k.COUNT_TYPE):].rpartition(SEP)
            counts = out.setdefault(task_type.decode("utf-8", "replace"), dict.fromkeys(STATUSES, 0))
            name = status.decode()
            if name in counts:
                counts[name] += int(value or 0)
    return dict(sorted(out.items()))


def tenant_counts(settings: Settings) -> dict[str, int]:
    """Every tenant the catalog has counted, with its jobs (every status, summed over the partitions)."""
    out: dict[str, int] = {}
    for _, store in READERS.stores(settings):
        for key, value in store.scan(k.COUNT_TENANT):
            tenant = key[len(k.COUNT_TENANT):].rpartition(SEP)[0].decode("utf-8", "replace")
            out[tenant] = out.get(tenant, 0) + int(value or 0)
    return dict(sorted(out.items()))


def dead_names(settings: Settings) -> tuple[set[str], set[str]]:
    """The tenants and the task types that have dead jobs, from the catalog's counters (one key per tenant or
    task type and status: nothing grows with the jobs)."""
    return _with_status(settings, k.COUNT_TENANT, "dead"), _with_status(settings, k.COUNT_TYPE, "dead")


def _with_status(settings: Settings, counter: bytes, status: str) -> set[str]:
    names: set[str] = set()
    for _, store in READERS.stores(settings):
        for key, value in store.scan(counter):
            name, _, counted = key[len(counter):].rpartition(SEP)
            if counted.decode() == status and int(value or 0) > 0:
                names.add(name.decode("utf-8", "replace"))
    return names
