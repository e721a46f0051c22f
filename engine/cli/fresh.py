"""How fresh an answer from the view is: which partitions the state directory's view holds, how far behind."""

from __future__ import annotations

import sys

from engine.config import Settings
from engine.errors import EpochqError
from engine.runtime.kafka.ports import topic_reader
from engine.questions.stores import applied_offsets

BEHIND_SLACK = 1
"""Records a caught-up store may trail the log's end by: the commit marker after its last transaction."""


def freshness(settings: Settings, applied: dict[int, int], ends: dict[int, int], why: str = "") -> str:
    """One line: the partitions answered for, those missing, those behind the log (``why``: why the log
    could not be read). Pure."""
    where = f"from the view in {settings.state_dir}"
    if not ends:
        because = f" ({why})" if why else ""
        return f"{where}: {len(applied)} partition(s); the log could not be read to compare{because}"
    missing = sorted(set(ends) - set(applied))
    behind = {p: ends[p] - (applied[p] + 1) for p in sorted(applied) if p in ends
              and ends[p] - (applied[p] + 1) > BEHIND_SLACK}
    parts = [f"{where}: {len(set(applied) & set(ends))} of {len(ends)} partition(s)"]
    if missing:
        parts.append(f"partition(s) {_list(missing)} not here, their jobs are left out")
    if behind:
        parts.append("behind the log: " + ", ".join(f"partition {p} by {n} record(s)" for p, n in behind.items()))
    if not missing and not behind:
        parts.append("up to date")
    return "; ".join(parts)


def say_freshness(settings: Settings) -> None:
    """Print on stderr how fresh the projections behind this answer are (stdout stays the answer)."""
    applied, why = applied_offsets(settings), ""
    try:
        with topic_reader(settings, "fresh") as reader:
            topic = settings.events_topic
            ends = reader.end_offsets(topic, reader.partitions(topic, "read", 5), timeout=5)
    except EpochqError as e:  # the answer stands; only the comparison is missing
        ends, why = {}, str(e).split(" (is the broker")[0]
    print(f"epochq: {freshness(settings, applied, ends, why)}", file=sys.stderr)


def _list(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers)
