"""Codec micro-benchmark: CPU microseconds per message through the codec, each way.

Run: python bench/codec_bench.py [--n 20000] [--runs 5]. For events (a typical job's lifecycle:
a submission with a 200-byte payload, queued, started, succeeded) and for commands (SubmitJob,
CancelJob), it times the codec's path (``encode_event``/``decode_event``,
``encode_command``/``decode_command``: generated writers and readers) and the general fastavro
path (dataclass -> dict -> ``schemaless_writer`` and back, the codec before the generated path,
still used for older schema versions) in alternating runs, and prints the median of the runs
and the ratio. Times are CPU time of this process (``time.process_time``), which other load on
the machine disturbs far less than wall-clock time. The garbage collector is set up as
``epochq engine run`` sets it up (engine/runtime/observe/gctuning.py: start-up objects frozen, young
collections every 10,000 allocations); ``--default-gc`` keeps CPython's defaults.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine.contract.codec import (
    MessageCodec,
    _codec,
    decode_command,
    decode_event,
    encode_command,
    encode_event,
)
from engine.contract.messages import (
    CancelJob,
    Command,
    CommandBody,
    Event,
    EventBody,
    JobQueued,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    Payload,
    SubmitJob,
)

NOW = 1_700_000_000_000_000


def sample_events() -> list[Event]:
    """One job's typical lifecycle: submitted, queued, started, succeeded."""
    job, tenant = str(uuid.uuid4()), "tenant-42"
    bodies: list[EventBody] = [
        JobSubmitted("email.send", Payload(b"x" * 200), 5, "NORMAL", 5, idempotency_key="order-1"),
        JobQueued("submitted"),
        JobStarted(1, NOW, "worker-3"),
        JobSucceeded(1, 12_345, b"ok"),
    ]
    return [Event(str(uuid.uuid4()), job, tenant, 7, "engine-a", NOW + i, body,
                  causation_id=str(uuid.uuid4())) for i, body in enumerate(bodies)]


def sample_commands() -> list[Command]:
    """What services send most: submissions (one with labels and a run_at), and a cancel."""
    tenant = "tenant-42"
    bodies: list[CommandBody] = [
        SubmitJob("email.send", Payload(b"x" * 200), idempotency_key="order-1"),
        SubmitJob("report.build", Payload(b'{"id": 7}'), 3, NOW + 5_000_000, labels={"team": "crm"}),
        CancelJob("no longer needed", "ops"),
    ]
    return [Command(str(uuid.uuid4()), str(uuid.uuid4()), tenant, NOW + i, body) for i, body in enumerate(bodies)]


def cpu_us_per_call(fn: Callable[[Any], Any], items: list[Any], n: int) -> float:
    """CPU microseconds per call of ``fn`` over ``n`` calls cycling through ``items``."""
    batch = (items * (n // len(items) + 1))[:n]
    start = time.process_time()
    for item in batch:
        fn(item)
    return (time.process_time() - start) * 1e6 / n


def compare(new: Callable[[Any], Any], old: Callable[[Any], Any], items: list[Any], n: int,
            runs: int) -> tuple[float, float]:
    """Medians of ``runs`` alternating runs of the new and the old function."""
    new_times, old_times = [], []
    for _ in range(runs):
        new_times.append(cpu_us_per_call(new, items, n))
        old_times.append(cpu_us_per_call(old, items, n))
    return statistics.median(new_times), statistics.median(old_times)


def report(what: str, codec: MessageCodec[Any], encode: Callable[[Any], bytes], decode: Callable[[bytes], Any],
           messages: list[Any], n: int, runs: int) -> None:
    """Check both paths agree byte for byte, then time and print both directions."""
    raws = [encode(m) for m in messages]
    assert raws == [codec.encode_general(m) for m in messages], "the paths write different bytes"
    assert [decode(r) for r in raws] == [codec.decode_general(r) for r in raws] == messages
    size = statistics.mean(len(r) for r in raws)
    for direction, new, old, items in (("encode", encode, codec.encode_general, messages),
                                       ("decode", decode, codec.decode_general, raws)):
        fast, general = compare(new, old, items, n, runs)
        print(f"{direction} {what:8s} {fast:6.2f} us/{what[:-1]}   fastavro path {general:6.2f} us   "
              f"x{general / fast:4.1f}")
    print(f"  (mean record {size:.0f} bytes, median of {runs} runs of {n}, CPU time)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (the median is printed)")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's default GC thresholds")
    args = parser.parse_args()
    if not args.default_gc:  # what engine/runtime/observe/gctuning.py does in an engine process
        gc.collect()
        gc.freeze()
        gc.set_threshold(10_000, 20, 20)
    report("events", _codec("event"), encode_event, decode_event, sample_events(), args.n, args.runs)
    report("commands", _codec("command"), encode_command, decode_command, sample_commands(), args.n, args.runs)


if __name__ == "__main__":
    main()
