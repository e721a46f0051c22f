"""A partition whose set-up fails after its store was opened can be set up again (real broker)."""

from __future__ import annotations

from pathlib import Path

from engine.config import load_settings
from engine.runtime.kafka import ports
from engine.runtime.loop.lifecycle import Lifecycle
from engine.runtime.loop.partition import Partition, State
from engine.runtime.topics import ensure_topics
from tests.integration.conftest import eventually


def test_a_set_up_that_failed_after_opening_the_store_is_retried_afresh(
    bootstrap: str, unique_ns: str, tmp_path: Path
) -> None:
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns, state_dir=str(tmp_path / "state"))
    events = ports.event_log(settings, "setup-test")
    # Only what set-up touches: the settings, the events reader, the partitions.
    lifecycle = Lifecycle(settings, "o1", None, events, None, None, None, 1.0)  # type: ignore[arg-type]
    lifecycle.partitions[0] = Partition(0, "o1")
    try:
        lifecycle.set_up()  # no events topic yet: the store opens, then its end cannot be read
        assert lifecycle.partitions[0].state is State.ASSIGNED and lifecycle.partitions[0].store is None

        ensure_topics(settings, partitions=1)

        def set_up_again() -> bool:
            """Retry at once (the new topic may take a moment to reach the reader's metadata)."""
            lifecycle.taking._retry_at.clear()
            lifecycle.set_up()  # used to fail for good: the store was still open (locked) in this process
            return lifecycle.partitions[0].state is State.RESTORING

        eventually(set_up_again, 30, "the partition set up afresh and restoring")
    finally:
        lifecycle.close_all()
        events.close()
