"""What each page shows, read through the questions package (engine.questions) and nothing else.

Nothing here works a figure out on its own: every number comes from a question that the CLI
and the client ask too (engine.questions.jobs, .stores, .deadletters, .holdups, .recent, …).
Each part of a page is a :class:`Got`, so a broker that does not answer or an empty state
directory costs that part, never the page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.config import Settings
from engine.console.got import Got, get
from engine.questions.deadletters import DeadPage, DeadQuery, dead_jobs, dead_page
from engine.questions.holdup_rows import HoldupRows, holdup_rows
from engine.questions.jobs import JobFilter, JobPage, JobRow, job_detail, list_jobs
from engine.questions.lookup import jobs_with_id_prefix, task_type_counts
from engine.questions.probe import EventsProbe
from engine.questions.recent import RecentActivity, RecentWindow
from engine.questions.stores import partition_dirs, view_dir
from engine.questions.view_status import ViewStatus, await_view, view_status

if TYPE_CHECKING:
    from engine.domain.jobs import JobView

log = logging.getLogger("epochq.console")
RECENT_WINDOW_S = 15 * 60
"""The overview's table and the lateness page's short window: the last 15 minutes."""
CHART_WINDOW_S = 3 * 3600
"""How far back the recent window reads the log (its first read), for the overview's throughput chart."""
PROBE_TIMEOUT_S = 2.0
PROBE_TTL_S = 5.0
CACHE_TTL_S = 4.0
"""How long the log's heavier answers (the overview, the tenants table, the workers, lateness) are kept:
just under the overview's refresh interval, so each refresh reads afresh once however many tabs ask."""
STALE_S = 15.0
"""How old a kept overview may be and still be shown at once while the next one is read behind it (three refreshes
of an open tab); an older one (nobody looked meanwhile) is read before the page is answered."""


def job_record(settings: Settings, job_id: str) -> tuple[int, JobView] | None:
    """The job's partition and record from the catalog's kept-open stores (``find_job``'s answer, without
    opening every store read-only for each page); None when no store here has it."""
    detail = job_detail(settings, job_id)
    return (detail.row.partition, detail.job) if detail is not None else None


def job_list(settings: Settings, flt: JobFilter, cursor: str | None, limit: int) -> JobPage:
    """One page of the job catalog (newest submission first) and its counts per status."""
    return list_jobs(settings, flt, cursor=cursor, limit=limit)


def dead_letter_page(settings: Settings, query: DeadQuery, after: str | None, before: str | None,
                     limit: int) -> DeadPage:
    """One page of the dead-letter queue (newest death first), its counts and its error groups."""
    return dead_page(settings, query, after=after, before=before, limit=limit)


def dead_letter_jobs(settings: Settings, query: DeadQuery) -> list[JobView]:
    """Every dead job a query admits: what a bulk replay or purge acts on."""
    return dead_jobs(settings, query)


def job_holdup(settings: Settings, task_type: str, partition: int) -> str | None:
    """What keeps a waiting job of ``task_type`` in ``partition`` from starting now (a pause, an open breaker, a
    rate limit), as the projections say; None when nothing does."""
    from engine.questions.holdups import Holdups, projection_source

    return Holdups(projection_source(settings)).why(task_type, partition, int(time.time() * 1_000_000))


def holdups_now(settings: Settings) -> HoldupRows:
    """Every partition's paused and rate-limited task types, and each task type's newest breaker record."""
    return holdup_rows(settings)


def task_types(settings: Settings) -> dict[str, dict[str, int]]:
    """Every task type the catalog has counted, with its jobs per status."""
    return task_type_counts(settings)


def jobs_by_id(settings: Settings, prefix: str) -> list[JobRow]:
    """The jobs whose id is ``prefix`` or starts with it (a bounded number), by id."""
    return jobs_with_id_prefix(settings, prefix)


def caught_up(settings: Settings) -> None:
    """Wait (a few seconds at most) until the view has folded what the log holds now: after an action, the
    page it leads to reads the decisions it caused (read your writes); nothing when no view process runs."""
    await_view(settings)


def view_lag_line(status: ViewStatus, now_us: int) -> str:
    """One line: who folds the view, how far it trails the log, how old the newest event it folded is. Pure."""
    if status.holder is None:
        return f"view: no view process folds {status.directory}; {status.lag} record(s) behind the log"
    ages = [age for p in status.partitions if (age := p.age_s(now_us)) is not None]
    newest = f", newest event folded {min(ages):.1f} s ago" if ages else ""
    ignored = f"; {status.ignored_line()}" if status.ignored else ""  # fenced or forged records: worth a look
    return f"view: {status.lag} record(s) behind the log{newest}{ignored}"


class LogProbe:
    """Whether the log answers, asked at most every few seconds: a page skips its log reads when it does not,
    instead of waiting for each reader's own timeout."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._probe = EventsProbe(settings)
        self._checked, self._problem = -PROBE_TTL_S, None  # type: float, str | None

    def problem(self) -> str | None:
        """None when the cluster answered lately; else the line that says it did not."""
        with self._lock:
            if time.monotonic() - self._checked > PROBE_TTL_S:
                self._problem = get(self._ask).problem
                self._checked = time.monotonic()
            return self._problem

    def _ask(self) -> None:
        self._probe.ask(PROBE_TIMEOUT_S)

    def close(self) -> None:
        """Release the probe's Kafka client."""
        with self._lock:
            self._probe.close()


class Cache:
    """Answers kept for a few seconds, so that every open tab refreshing costs one read, not one each."""

    def __init__(self, ttl_s: float, stale_s: float = STALE_S):
        self.ttl_s, self.stale_s = ttl_s, stale_s
        self._lock = threading.Lock()
        self._kept: dict[object, tuple[float, Any]] = {}
        self._renewing: set[object] = set()

    def get(self, key: object, read: Callable[[], Any], *, renew_behind: bool = False) -> Any:
        """The answer kept under ``key`` if fresh, else ``read()``'s (kept). ``renew_behind``: an answer past its
        ttl but younger than ``stale_s`` is returned at once while a thread reads the next one (one at a time)."""
        with self._lock:
            kept = self._kept.get(key)
            age = time.monotonic() - kept[0] if kept is not None else None
            if kept is not None and age is not None and age < self.ttl_s:
                return kept[1]
            if renew_behind and kept is not None and age is not None and age < self.stale_s:
                if key not in self._renewing:
                    self._renewing.add(key)
                    threading.Thread(target=self._renew, args=(key, read), daemon=True,
                                     name=f"console-renew-{key}").start()
                return kept[1]
        return self._read(key, read)

    def _read(self, key: object, read: Callable[[], Any]) -> Any:
        value = read()
        with self._lock:
            self._kept[key] = (time.monotonic(), value)
        return value

    def _renew(self, key: object, read: Callable[[], Any]) -> None:
        try:
            self._read(key, read)
        except Exception as e:  # noqa: BLE001 - the next request past stale_s reads it itself, and says why
            log.warning("console: renewing %s: %s", key, e)
        finally:
            with self._lock:
                self._renewing.discard(key)

    def forget(self, key: object) -> None:
        """Drop the answer kept under ``key`` (an action changed what it says)."""
        with self._lock:
            self._kept.pop(key, None)


@dataclass
class Reads:
    """The console's reader: its settings, the log probe, the recent window and the short-lived cache."""

    settings: Settings
    probe: LogProbe
    cache: Cache = field(default_factory=lambda: Cache(CACHE_TTL_S))
    _window: RecentWindow | None = None
    _making: threading.Lock = field(default_factory=threading.Lock)

    def recent(self) -> RecentWindow:
        """The window over the last minutes of the log, made on first use and kept (it reads only what is new)."""
        with self._making:
            if self._window is None:
                self._window = RecentWindow(self.settings, CHART_WINDOW_S)
            return self._window

    def activity(self, last_s: int = RECENT_WINDOW_S) -> RecentActivity:
        """What the log says happened in the last ``last_s`` seconds (within the window), read now."""
        now = int(time.time() * 1_000_000)
        return self.recent().read(now).last(now - last_s * 1_000_000)

    def close(self) -> None:
        """Release the Kafka clients."""
        self.probe.close()
        if self._window is not None:
            self._window.close()

    def state_notice(self) -> str | None:
        """A line for a state directory that holds no view (the pages that read it are empty)."""
        if partition_dirs(self.settings):
            return None
        where = view_dir(self.settings)
        return (f"no view in {where}: the console reads the view of its state directory (--state-dir or "
                "EPOCHQ_STATE_DIR), which it starts when none runs there; until it has folded events, its pages are "
                "empty")

    def view_lag(self) -> Got[str]:
        """The overview's line on the view: how many records it trails the log by, and how old its newest event is."""
        return self.from_log(lambda: view_lag_line(view_status(self.settings), int(time.time() * 1e6)), "view-lag")

    def from_log(self, read: Callable[[], Any], key: object = None) -> Got[Any]:
        """``read()`` when the log answers (kept a few seconds under ``key`` if given); else the probe's line."""
        problem = self.probe.problem()
        if problem:
            return Got(None, problem)
        return get(read) if key is None else get(lambda: self.cache.get(key, read))
