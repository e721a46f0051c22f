"""The route step: each command record and each finished attempt goes to its partition's queue.

It takes what arrived and the partitions held, and returns what it could not place: how many
command records it dropped (the inbox counts them as decided) and the rewinds it asks the
commands reader for. A record goes to its partition's queue while the partition is ACTIVE and
the record was read after the partition's last rewind (``accept_tag``); a record of a
partition still restoring or claiming is read again once it is active, so the partition is
rewound to it (once per call: the records behind it are read again with it). A finished
attempt goes to its partition while that partition decides (or resumes under the same epoch);
otherwise it is dropped, and a newer owner re-queues the job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from engine.runtime.execution.verdicts import RunResult
from engine.runtime.loop.partition import Partition, State
from engine.runtime.signatures import signature_of

log = logging.getLogger("epochq.engine")


class CommandRecord(Protocol):
    """One record of the commands topic as the reader hands it over (a Kafka message, or one in memory)."""

    def error(self) -> Any:
        """Why it is no record (an error the consumer reported), or None."""

    def partition(self) -> int | None:
        """Its partition."""

    def offset(self) -> int | None:
        """Its offset."""

    def value(self) -> bytes | None:
        """Its value: the encoded command."""

    def headers(self) -> Any:
        """Its headers (the signature's, if any)."""


@dataclass(frozen=True, slots=True)
class Rewind:
    """Read ``partition`` of the commands topic again from ``offset``."""

    partition: int
    offset: int


@dataclass(slots=True)
class Routed:
    """What the route step could not place: records dropped, and the rewinds it asks for."""

    dropped: int = 0
    rewinds: list[Rewind] = field(default_factory=list)


def route(partitions: Mapping[int, Partition], records: Iterable[tuple[int, CommandRecord]],
          results: Iterable[RunResult]) -> Routed:
    """Queue each command record (with its seek tag) and each result at its partition; what was not placed."""
    routed, rewound = Routed(), set[int]()
    for tag, msg in records:
        if not _command(partitions, tag, msg, rewound, routed):
            routed.dropped += 1
    for result in results:
        partition = partitions.get(result.request.partition)
        if partition is not None and (partition.deciding or partition.resuming):  # resuming: same epoch
            partition.inbound.results.append(result)  # recorded once it decides again (a resync must not lose it)
        else:
            log.warning("dropping result of job %s attempt %d: partition %d is no longer ours",
                        result.request.job_id, result.request.attempt, result.request.partition)
    return routed


def _command(partitions: Mapping[int, Partition], tag: int, msg: CommandRecord, rewound: set[int],
             routed: Routed) -> bool:
    """Queue one record; whether it was queued."""
    if msg.error():
        log.warning("commands consumer: %s", msg.error())
        return False
    # The stubs type partition() and offset() as optional, for error messages; a record has both, and a
    # null value goes to admission as it is (quarantined there).
    number, offset = cast(int, msg.partition()), cast(int, msg.offset())
    partition = partitions.get(number)
    if partition is None or tag < partition.accept_tag or number in rewound:
        return False  # not ours any more, or read before we rewound: dropped
    if partition.state is State.ACTIVE:
        partition.inbound.commands.append((offset, msg.value(), signature_of(msg.headers())))
        return True
    if partition.state in (State.RESTORING, State.CLAIMING):  # read again once active
        rewound.add(number)
        routed.rewinds.append(Rewind(number, offset))
    return False
