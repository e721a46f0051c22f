"""Codec micro-benchmark: events per second through encode_event and decode_event.

Run: python bench/codec_bench.py [--n 20000]. Prints the median of 5 runs for each direction,
for a typical mix of event bodies (a submission with a 200-byte payload, then the lifecycle).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from engine.contract.codec import decode_event, encode_event
from engine.contract.messages import (
    Event, JobQueued, JobStarted, JobSubmitted, JobSucceeded, Payload,
)

RUNS = 5


def sample_events() -> list[Event]:
    """One job's typical lifecycle: submitted, queued, started, succeeded."""
    job, tenant, now = str(uuid.uuid4()), "tenant-42", 1_700_000_000_000_000
    bodies = [
        JobSubmitted("email.send", Payload(b"x" * 200), 5, "NORMAL", 5, idempotency_key="order-1"),
        JobQueued("submitted"),
        JobStarted(1, now, "worker-3"),
        JobSucceeded(1, 12_345, b"ok"),
    ]
    return [Event(str(uuid.uuid4()), job, tenant, 7, "engine-a", now + i, body,
                  causation_id=str(uuid.uuid4())) for i, body in enumerate(bodies)]


def rate(fn, items: list, n: int) -> float:
    """Calls of ``fn`` per second over ``n`` calls cycling through ``items``."""
    batch = (items * (n // len(items) + 1))[:n]
    start = time.perf_counter()
    for item in batch:
        fn(item)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000, help="events per run")
    n = parser.parse_args().n
    events = sample_events()
    raws = [encode_event(e) for e in events]
    assert [decode_event(r) for r in raws] == events
    enc = statistics.median(rate(encode_event, events, n) for _ in range(RUNS))
    dec = statistics.median(rate(decode_event, raws, n) for _ in range(RUNS))
    size = statistics.mean(len(r) for r in raws)
    print(f"encode_event: {enc:>10,.0f} events/s  ({1e6 / enc:.2f} us/event)")
    print(f"decode_event: {dec:>10,.0f} events/s  ({1e6 / dec:.2f} us/event)")
    print(f"round trip:   {1 / (1 / enc + 1 / dec):>10,.0f} events/s  (mean record {size:.0f} bytes,"
          f" median of {RUNS} runs of {n})")


if __name__ == "__main__":
    main()
