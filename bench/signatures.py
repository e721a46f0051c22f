"""Command signatures: CPU microseconds to sign a command (a client) and to check it (an engine).

Run: python bench/signatures.py [--n 20000] [--runs 5]. A SubmitJob with a 200-byte payload is
encoded once; the client's cost is ``CommandSigner.headers`` (Ed25519 over the context, topic
and record), the engine's is ``CommandChecker`` on a signed command (one tenant key, plus the
engines' key tried first) and on an unsigned one with signatures not required (the default: no
cryptography at all). Prints the median of the runs, in CPU µs per command (``time.process_time``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.config import load_settings
from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.runtime.signatures import CommandChecker, CommandSigner, signature_of


def per_call_us(fn: Callable[[], object], n: int, runs: int) -> float:
    """Median over ``runs`` of the CPU µs one call of ``fn`` takes."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        for _ in range(n):
            fn()
        times.append((time.process_time() - start) / n * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    settings = load_settings(bootstrap="127.0.0.1:9092", namespace="bench")
    body = m.SubmitJob("email.send", m.Payload(b'{"to":"a@b.c","body":"' + b"x" * 170 + b'"}'))
    command = m.Command(str(uuid.uuid4()), str(uuid.uuid4()), "acme", 1_700_000_000_000_000, body)
    value = encode_command(command)
    tenant, engines = CommandSigner(Ed25519PrivateKey.generate(), settings.commands_topic), \
        CommandSigner(Ed25519PrivateKey.generate(), settings.commands_topic)
    signature = signature_of(tenant.headers(value))
    required = CommandChecker(settings.model_copy(update={"require_signatures": True}),
                              lambda _t: (tenant.public_key,), engines)
    optional = CommandChecker(settings, lambda _t: (), None)
    assert required(command, value, signature).refusal is None
    rows = [
        ("client: sign a command", per_call_us(lambda: tenant.headers(value), args.n, args.runs)),
        ("engine: check a signed command (required)", per_call_us(lambda: required(command, value, signature),
                                                                  args.n, args.runs)),
        ("engine: check an unsigned command (not required)", per_call_us(lambda: optional(command, value, None),
                                                                         args.n, args.runs)),
    ]
    print(f"command record: {len(value)} bytes; median of {args.runs} runs of {args.n:,}")
    for name, us in rows:
        print(f"{name:<52} {us:8.2f} µs  ({1e6 / us:>10,.0f} /s per core)")


if __name__ == "__main__":
    main()
