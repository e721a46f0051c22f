"""How each dependency of a waiting job ended, kept beside its record until it has run. Pure over a batch.

Keys (beside those of ``projections.views.keys``)::

    y:<dependent>\\x1f<dependency>   -> (status, result, error) as a marshal v2 tuple

One key per ``DependencyReported``, so that a report costs the same whatever the number of
dependencies (a copy of one table of 10,000 reports per report would not), and the job record
stays small. Decisions read one key (was this dependency reported already?); the attempt that
runs the job reads them all (``ctx.dependency_results``). They go when the job completes or is
cancelled (a dead job keeps them: a replay runs it again).
"""

from __future__ import annotations

import marshal
from typing import Any

from engine.contract import messages as m
from engine.domain.jobs import JobView

REPORT = b"y:"
SEP = b"\x1f"
Report = tuple[str, bytes | None, str]
"""(status, result, error) of one dependency."""


def report_key(dependent: str, dependency: str) -> bytes:
    """Where how ``dependency`` ended is kept for ``dependent``."""
    return REPORT + dependent.encode() + SEP + dependency.encode()


def fold_report(batch: Any, job_id: str, body: m.DependencyReported) -> None:
    """Keep one dependency's report."""
    batch.put(report_key(job_id, body.dependency_job_id), marshal.dumps((body.status, body.result, body.error), 2))


def read_report(reader: Any, dependent: str, dependency: str) -> Report | None:
    """How ``dependency`` ended, as ``dependent`` was told; None if it was not (yet)."""
    raw = reader.get(report_key(dependent, dependency))
    return None if raw is None else tuple(marshal.loads(raw))


def read_reports(reader: Any, job: JobView) -> dict[str, Report]:
    """Every report ``job`` received, by dependency, in the order of its ``depends_on``."""
    found = {d: read_report(reader, job.job_id, d) for d in job.depends_on or ()}
    return {d: r for d, r in found.items() if r is not None}


def drop_reports(batch: Any, job: JobView) -> None:
    """The job ended: its reports go."""
    for dependency in job.depends_on or ():
        batch.delete(report_key(job.job_id, dependency))
