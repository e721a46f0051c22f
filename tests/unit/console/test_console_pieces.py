"""The console's pure pieces added for issue 22: ids in paths, dead-letter groups, progress, charts, paging text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config import Settings, load_settings
from engine.console.charts import timeseries_svg
from engine.console.jobpage import duration, folded_timeline, pretty
from engine.console.overview import throughput_series
from engine.console.params import path_ids, segment
from engine.console.tasktypes import task_type_rows
from engine.domain.jobs import AttemptError, JobView, replace
from engine.errors import ValidationError
from engine.questions.deadletters import DeadQuery, dead_page, error_group
from engine.questions.stores import DeadFilter
from projections.store import ProjectionStore, view_store_path
from projections.views import keys as k
from projections.views.jobs import encode_job

SHAPE = ("actions", "jobs", None, "cancel")


def test_an_id_is_one_fully_encoded_segment() -> None:
    assert segment("y/../abc") == "y%2F..%2Fabc"
    assert segment("a b?c#d&e") == "a%20b%3Fc%23d%26e"
    assert path_ids(b"/actions/jobs/" + segment("y/../abc").encode() + b"/cancel", SHAPE) == ["y/../abc"]
    assert path_ids(b"/actions/jobs/plain-id/cancel?x=1", SHAPE) == ["plain-id"]


@pytest.mark.parametrize("raw", [b"/actions/jobs/y/../abc/cancel", b"/actions/jobs/abc/replay",
                                 b"/actions/jobs/../cancel", b"/actions/jobs//cancel", b"/actions/jobs/%FF/cancel"])
def test_a_path_of_another_shape_names_no_id(raw: bytes) -> None:
    with pytest.raises(ValidationError, match="path"):
        path_ids(raw, SHAPE)


# --- the dead-letter queue, a page at a time -------------------------------------------------

def _dead(job_id: str, dead_at: int, tenant: str, error: str) -> JobView:
    from engine.contract import messages as m
    from engine.domain.lifecycle import JobState

    failure = AttemptError(1, "ValueError", f"{error}\nsecond line", "Traceback ...", 10, dead_at)
    return JobView(job_id, tenant, "send", JobState.DEAD, 5, "NORMAL", 1, m.Payload(b"{}"), dead_at - 5, dead_at,
                   1, attempt=1, finished_at=dead_at, errors=(failure,), dead_reason="attempts exhausted")


@pytest.fixture
def dead_dir(tmp_path: Path) -> Settings:
    """A state directory of two partitions holding 25 dead jobs: 20 of acme (two errors), 5 of globex."""
    settings = load_settings(bootstrap="127.0.0.1:1", namespace="dead-unit", state_dir=str(tmp_path))
    jobs = [_dead(f"j{n:02d}", 1_000 + n, "acme" if n < 20 else "globex", "bad address" if n % 2 else "timeout")
            for n in range(25)]
    for p in (0, 1):
        store = ProjectionStore(view_store_path(tmp_path, "dead-unit", p))  # questions read the view
        changes: dict[bytes, bytes | None] = {}
        for job in jobs[p::2]:
            changes[k.job_key(job.job_id)] = encode_job(job)
            changes[k.dead_key(job.finished_at or 0, job.job_id)] = job.job_id.encode()
        store.commit(changes, 0)
        store.close()
    return settings


def test_dead_letters_page_newest_first_both_ways_with_counts_and_groups(dead_dir: Settings) -> None:
    first = dead_page(dead_dir, DeadQuery(), limit=10)
    assert [j.job_id for j in first.rows] == [f"j{n:02d}" for n in range(24, 14, -1)]
    assert (first.first, first.total, first.exact, first.prev_cursor) == (0, 25, True, None)
    assert first.groups == [("ValueError: bad address", 12), ("ValueError: timeout", 13)][::-1]
    second = dead_page(dead_dir, DeadQuery(), after=first.next_cursor, limit=10)
    assert [j.job_id for j in second.rows] == [f"j{n:02d}" for n in range(14, 4, -1)] and second.first == 10
    third = dead_page(dead_dir, DeadQuery(), after=second.next_cursor, limit=10)
    assert [j.job_id for j in third.rows] == [f"j{n:02d}" for n in range(4, -1, -1)]
    assert (third.first, third.next_cursor) == (20, None)
    back = dead_page(dead_dir, DeadQuery(), before=third.prev_cursor, limit=10)
    assert back.rows == second.rows and back.first == 10
    assert dead_page(dead_dir, DeadQuery(), before=back.prev_cursor, limit=10).rows == first.rows


def test_dead_letters_filter_by_tenant_time_and_error_group(dead_dir: Settings) -> None:
    globex = dead_page(dead_dir, DeadQuery(DeadFilter(tenant="globex")), limit=3)
    assert [j.job_id for j in globex.rows] == ["j24", "j23", "j22"] and globex.total == 5
    timed = dead_page(dead_dir, DeadQuery(DeadFilter(since_us=1_003, until_us=1_006)))
    assert [j.job_id for j in timed.rows] == ["j05", "j04", "j03"] and timed.total == 3
    grouped = dead_page(dead_dir, DeadQuery(DeadFilter(tenant="acme"), "ValueError: bad address"))
    assert grouped.total == 10 and {j.job_id for j in grouped.rows} == {f"j{n:02d}" for n in range(1, 20, 2)}
    assert dict(grouped.groups) == {"ValueError: bad address": 10, "ValueError: timeout": 10}
    with pytest.raises(ValidationError, match="cursor"):
        dead_page(dead_dir, DeadQuery(), after="nonsense!")


def test_an_error_group_is_the_last_errors_first_line_or_the_dead_reason() -> None:
    job = _dead("j", 1, "acme", "x" * 500)
    assert error_group(job) == ("ValueError: " + "x" * 500)[:160]
    assert error_group(replace(job, errors=())) == "attempts exhausted"


# --- the job page's pieces, the throughput chart ----------------------------------------------

def test_progress_reports_fold_into_their_latest_row() -> None:
    rows = [{"type": t, "offset": n} for n, t in enumerate(
        ["JobSubmitted", "JobStarted", "JobProgressed", "JobProgressed", "JobProgressed", "JobFailed",
         "JobStarted", "JobProgressed"])]
    folded = folded_timeline(rows)
    assert [(r["type"], r["offset"], r.get("reports")) for r in folded] == [
        ("JobSubmitted", 0, None), ("JobStarted", 1, None), ("JobProgressed", 4, 3), ("JobFailed", 5, None),
        ("JobStarted", 6, None), ("JobProgressed", 7, 1)]


def test_payloads_are_pretty_printed_when_json_and_durations_read_well() -> None:
    assert pretty('{"a":{"b":[1,2]},"é":1}') == '{\n  "a": {\n    "b": [\n      1,\n      2\n    ]\n  },\n  "é": 1\n}'
    assert pretty("not json") == "not json" and pretty(None) is None
    assert [duration(s) for s in (5, 65, 3 * 3600 + 20 * 60)] == ["5 s", "1 min 5 s", "3 h 20 min"]


def test_a_job_page_lists_each_failed_attempt_with_its_traceback() -> None:
    from engine.console.jobpage import attempt_errors

    def failed(attempt: int, fenced: bool = False) -> dict[str, Any]:
        return {"type": "JobFailed", "fenced": fenced, "at_us": attempt * 1000,
                "detail": {"attempt": attempt, "error_type": "KeyError", "message": "'to'", "duration_us": 5,
                           "traceback": f"Traceback ...\n  File \"app.py\", line {attempt}, in send\nKeyError: 'to'"}}

    events = [{"type": "JobStarted", "fenced": False, "at_us": 0, "detail": {}}, failed(1), failed(2, fenced=True),
              failed(3)]
    shown = attempt_errors(None, events)
    assert [a["attempt"] for a in shown] == [1, 3] and 'line 3, in send' in shown[-1]["traceback"]
    job = replace(_dead("j", 10, "t", "e"), errors=(AttemptError(1, "KeyError", "'to'", "Traceback: in send", 5, 9),))
    assert [a["traceback"] for a in attempt_errors(job, [])] == ["Traceback: in send"]  # no history read: the record


def _tally(ok: int, failed: int, dead: int, kind: str = "send") -> Any:
    from collections import Counter

    from engine.questions.recent import Tally

    return Tally({kind: Counter(succeeded=ok, failed=failed, dead=dead)})


def test_throughput_series_buckets_the_minutes_of_each_task_type() -> None:
    minutes = {100: _tally(1, 0, 0), 109: _tally(2, 1, 0), 110: _tally(4, 0, 1), 80: _tally(9, 9, 9)}
    series = throughput_series(minutes, end_minute=119, step_min=10, steps=3)
    assert series == {"send": [(90, 0, 0), (100, 3, 0), (110, 4, 1)]}  # minute 80 is before the window
    svg = str(timeseries_svg([("01:40", 3, 1), ("01:50", 4, 1)], "send <b>"))
    assert svg.count('class="bar ok"') == 3 and "send &lt;b&gt;" in svg and "<b>" not in svg
    assert "4 succeeded, 1 dead-lettered" in svg


def test_a_job_that_failed_then_went_dead_is_charted_once() -> None:
    """900 jobs of one attempt each, every one failed then dead-lettered: 900 dead letters, not 1,800 failures
    (each job ended once: a failed attempt is the ending only through its dead letter)."""
    minutes = {110: _tally(0, 900, 900), 111: _tally(5, 3, 0), 112: _tally(0, 4, 0, kind="retrying.only")}
    series = throughput_series(minutes, end_minute=119, step_min=10, steps=3)
    assert series == {"send": [(90, 0, 0), (100, 0, 0), (110, 5, 900)]}  # attempts retried end nothing yet
    assert sum(ok + dead for _, ok, dead in series["send"]) == 905


def test_task_type_rows_join_counts_pauses_limits_and_breakers() -> None:
    from engine.domain.breaker import BreakerStatus
    from engine.questions.holdup_rows import HoldupRows
    from projections.views.breakers import BreakerRecord
    from projections.views.pauses import PauseRecord

    holdups = HoldupRows([BreakerRecord("fetch", BreakerStatus.OPEN, 5, 5, 99, "boom")],
                         [(0, PauseRecord("send", 1, "outage", "ops")), (1, PauseRecord("send", 1, "outage", "ops"))],
                         frozenset({0, 1}), [])
    rows = task_type_rows({"send": {"queued": 3}, "zip": {"queued": 0}}, holdups)
    assert [(r.task_type, len(r.paused), r.breaker is not None, r.counts.get("queued")) for r in rows] == [
        ("fetch", 0, True, None), ("send", 2, False, 3), ("zip", 0, False, 0)]


def test_the_jobs_list_goes_back_by_the_trail_of_cursors_in_its_url() -> None:
    from urllib.parse import parse_qs, urlsplit

    from engine.console.jobslist import FIRST, trail_links

    def query(url: str) -> dict[str, list[str]]:
        return parse_qs(urlsplit(url).query)

    first = trail_links({"tenant": "a b"}, [], None, "c1")
    assert set(first) == {"next"} and query(first["next"]) == {"tenant": ["a b"], "cursor": ["c1"], "trail": [FIRST]}
    second = trail_links({"tenant": "a b"}, [FIRST], "c1", "c2")
    assert query(second["prev"]) == {"tenant": ["a b"]} and query(second["first"]) == {"tenant": ["a b"]}
    assert query(second["next"])["trail"] == [f"{FIRST},c1"]
    last = trail_links({}, [FIRST, "c1"], "c2", None)
    assert "next" not in last and query(last["prev"]) == {"cursor": ["c1"], "trail": [FIRST]}


def test_a_stale_overview_is_shown_at_once_while_the_next_is_read_behind_it() -> None:
    import threading
    import time

    from engine.console.reads import Cache

    cache, gate = Cache(ttl_s=4.0, stale_s=15.0), threading.Event()
    assert cache.get("overview", lambda: 1, renew_behind=True) == 1  # nothing kept: read in the request

    def slow_read() -> int:
        gate.wait(10)
        return 2

    cache._kept["overview"] = (time.monotonic() - 5, 1)  # past its ttl, within stale_s
    assert cache.get("overview", slow_read, renew_behind=True) == 1  # answered while the read is held back
    assert cache.get("overview", slow_read, renew_behind=True) == 1  # one renewal at a time
    gate.set()
    deadline = time.monotonic() + 10
    while cache.get("overview", slow_read, renew_behind=True) != 2:
        assert time.monotonic() < deadline, "the renewal never landed"
    cache._kept["overview"] = (time.monotonic() - 60, 2)  # nobody looked for a minute: read before answering
    assert cache.get("overview", lambda: 3, renew_behind=True) == 3


def test_a_schedule_whose_task_type_is_paused_is_not_shown_healthy() -> None:
    from engine.console.pages import schedule_state

    assert schedule_state(True, "report", set()) == "enabled"
    assert schedule_state(True, "report", {"report"}) == "task-paused"
    assert schedule_state(False, "report", {"report"}) == "paused"
