"""How long one-shot ``epochq`` commands take to say that the broker cannot be reached.

Runs each command as a user would (``python -m engine.cli.main``, a process of its own) with a
bootstrap that points to a closed port and with a host that does not resolve, and prints the
seconds each took, its exit status and its one line on stderr. No broker is needed.

Usage: python bench/unreachable.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (("status", "some-job"), ("submit", "echo", "--tenant", "a"), ("queues",), ("topics", "describe"),
            ("history", "some-job"), ("cancel", "some-job", "--tenant", "a"), ("tenants", "list"))


def closed_port() -> str:
    """An address on this machine where nothing listens."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        return f"127.0.0.1:{server.getsockname()[1]}"


def run_once(command: tuple[str, ...], bootstrap: str, state_dir: str) -> tuple[float, int, str]:
    """Seconds, exit status and the first stderr line of one run."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "engine.cli.main", *command, "--bootstrap", bootstrap,
                           "--namespace", "bench-unreachable", "--state-dir", state_dir], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "EPOCHQ_TRACEBACK": "0"})
    lines = done.stderr.strip().splitlines()
    return time.monotonic() - started, done.returncode, lines[0] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    targets = (("closed port", closed_port()), ("unknown host", "no-such-host.invalid:9092"))
    with tempfile.TemporaryDirectory() as state_dir:
        print(f"{'bootstrap':13} {'command':22} {'median s':>8} {'max s':>6} exit  first line")
        for label, bootstrap in targets:
            for command in COMMANDS:
                runs = [run_once(command, bootstrap, state_dir) for _ in range(args.repeat)]
                seconds = [r[0] for r in runs]
                print(f"{label:13} {' '.join(command[:2]):22} {statistics.median(seconds):8.2f} {max(seconds):6.2f} "
                      f"{runs[-1][1]:>4}  {runs[-1][2][:110]}")


if __name__ == "__main__":
    main()
