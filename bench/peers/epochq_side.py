"""epochq side of bench/peers: the same three figures as bullmq.mjs, each in a fresh namespace."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.harness import engine_process, follow_events, fresh_settings
from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.errors import KafkaUnavailableError
from engine.runtime import kafka

APP = "bench.apps:app"  # its `noop` task returns None
PARTITIONS = 6  # what `epochq topics ensure` creates by default
TENANT = "peers"  # one tenant, as BullMQ has one queue
FOLLOW_TIMEOUT_S = 900


def warm_up(bootstrap: str) -> None:
    """One job into a throwaway namespace, so that a broker just started has its coordinators loaded."""
    with namespace(bootstrap) as settings, Client(settings) as client:
        submit_all(client, 1, 1)


def submit(bootstrap: str, jobs: int, batch: int) -> float:
    """Jobs/s of ``Client.submit_many`` in batches of ``batch``, with no engine running."""
    with namespace(bootstrap) as settings, Client(settings) as client:
        t0 = time.monotonic()
        submit_all(client, jobs, batch)
        return jobs / (time.monotonic() - t0)


def drain(bootstrap: str, jobs: int, batch: int, engine_flags: list[str]) -> dict[str, float]:
    """Jobs/s from the first submit to the last JobSucceeded, the engine started beforehand."""
    done: list[int] = []

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobSucceeded):
            done.append(event.occurred_at)
        return len(done) >= jobs

    with namespace(bootstrap) as settings, engine_process(settings, APP, *engine_flags), \
            Client(settings) as client, following(settings, until):
        t0 = time.time()
        submit_all(client, jobs, batch)
    elapsed = max(done) / 1e6 - t0
    return {"jobs_per_s": jobs / elapsed, "elapsed_s": elapsed}


def lateness(bootstrap: str, jobs: int, batch: int, span_s: float, lead_s: float) -> dict[str, Any]:
    """JobStarted.occurred_at - due_at (ms) of ``jobs`` jobs due evenly over ``span_s``, ``lead_s`` ahead."""
    late: list[float] = []
    accepted: list[int] = []

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobSubmitted):
            accepted.append(event.occurred_at)
        elif isinstance(event.body, m.JobStarted):
            late.append((event.occurred_at - event.body.due_at) / 1000)
        return len(late) >= jobs

    with namespace(bootstrap) as settings, engine_process(settings, APP), Client(settings) as client, \
            following(settings, until):
        first = time.time() + lead_s
        submit_all(client, jobs, batch, lambda i: first + i * span_s / jobs)
    return {"lateness_ms": late, "accepted_before_due_s": first - max(accepted) / 1e6}


@contextmanager
def namespace(bootstrap: str) -> Iterator[Settings]:
    """A fresh namespace whose partitions have leaders; its state directory is removed unless the block fails."""
    settings = fresh_settings(bootstrap, PARTITIONS)
    wait_for_leaders(settings)
    yield settings
    shutil.rmtree(settings.state_dir, ignore_errors=True)


def wait_for_leaders(settings: Settings, timeout: float = 30.0) -> None:
    """Until every events partition answers (a broker just started elects leaders in its first seconds)."""
    reader = kafka.events_reader(settings, "bench")
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                kafka.end_offsets(reader, settings.events_topic, range(PARTITIONS))
                return
            except KafkaUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        reader.close()


def submit_all(client: Client, jobs: int, batch: int, run_at: Callable[[int], float] | None = None) -> None:
    """``jobs`` no-op jobs through ``submit_many`` in batches; ``run_at(i)``: job i's due time (epoch s)."""
    for first in range(0, jobs, batch):
        client.submit_many([{"task_type": "noop", "payload": {}, "tenant": TENANT,
                             "run_at": run_at(i) if run_at else None} for i in range(first, min(jobs, first + batch))])


@contextmanager
def following(settings: Settings, until: Callable[[m.Event], bool]) -> Iterator[None]:
    """Follow the events topic in a thread during the block; on leaving, wait until ``until`` said so."""
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            follow_events(settings, PARTITIONS, until, FOLLOW_TIMEOUT_S)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    yield
    thread.join()
    if errors:
        raise errors[0]
