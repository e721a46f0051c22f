"""Command signatures: CPU microseconds to sign a command (a client) and to check it (an engine).

Run: python bench/signatures.py [--n 20000] [--runs 5]. A SubmitJob with a 200-byte payload is
encoded once; the client's cost is ``CommandSigner.headers`` (Ed25519 over the context, topic
and record), the engine's is ``CommandChecker`` on a signed command (one tenant key, plus the
engines' key tried first) and on an unsigned one with signatures not required (the default: no
cryptography at all); and a remote worker's result (``ReportAttempt``) for an attempt of pool ``gpu``, with two
pools' keys known (``pool_public_keys_dir``): signed by the pool's key, by an operator's, by the other pool's
(refused). Prints the median of the runs, in CPU µs per command (``time.process_time``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.config import Settings, load_settings
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
    rows += result_rows(settings, engines, args.n, args.runs)
    print(f"command record: {len(value)} bytes; median of {args.runs} runs of {args.n:,}")
    for name, us in rows:
        print(f"{name:<52} {us:8.2f} µs  ({1e6 / us:>10,.0f} /s per core)")


def result_rows(settings: Settings, engines: CommandSigner, n: int, runs: int) -> list[tuple[str, float]]:
    """A worker's result checked by an engine that knows pools gpu and cpu and an operator key."""
    keys = {name: Ed25519PrivateKey.generate() for name in ("gpu", "cpu", "operator")}
    report = m.ReportAttempt(1, 1 << 32 | 1, "succeeded", 5, b"{}", worker="w", pool="gpu")
    command = m.Command(str(uuid.uuid4()), str(uuid.uuid4()), "acme", 1_700_000_000_000_000, report)
    value = encode_command(command)
    with tempfile.TemporaryDirectory() as folder:
        for name, key in keys.items():
            path = Path(folder) / (f"{name}.pem" if name != "operator" else "operator.pub")
            path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
        checker = CommandChecker(settings.model_copy(update={
            "require_signatures": True, "pool_public_keys_dir": Path(folder),
            "operator_public_key_file": Path(folder) / "operator.pub"}), lambda _t: (), engines)
    signed = {name: signature_of(CommandSigner(key, settings.commands_topic).headers(value))
              for name, key in keys.items()}
    assert checker(command, value, signed["gpu"], "gpu").refusal is None
    assert checker(command, value, signed["cpu"], "gpu").reason == "unauthorized"
    return [(f"engine: check a result signed by {label}",
             per_call_us(lambda s=signed[name]: checker(command, value, s, "gpu"), n, runs))  # type: ignore[misc]
            for name, label in (("gpu", "its pool's key"), ("operator", "an operator key"),
                                ("cpu", "another pool's (refused)"))]


if __name__ == "__main__":
    main()
