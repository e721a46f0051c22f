"""``epochq engine run APP --processes N``: N engine processes in one consumer group, one signal stops all.

Python runs one thread of Python at a time, so an engine instance uses about one core. On
a machine with more, run more instances: each is a member of the same consumer group and
owns a share of the partitions, exactly as instances on other machines would. They share
the state directory: a partition that moves between them keeps its store (the store is
locked while a process holds it; the next holder waits for the lock).

The supervisor forwards SIGTERM and SIGINT to every child (each then stops gracefully), and
starts again a child that dies on its own, after a pause that doubles up to a minute.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from engine.errors import ConfigError

log = logging.getLogger("epochq.supervisor")

RESTART_PAUSE_S = 1.0
MAX_RESTART_PAUSE_S = 60.0


def process_count(value: str) -> int:
    """``auto`` (the number of cores) or a whole number >= 1."""
    if value == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--processes: expected a whole number >= 1 or 'auto', got {value!r}")
    return n


@dataclass
class Child:
    """One engine process and when it may be started again."""

    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    pause: float = RESTART_PAUSE_S
    start_after: float = 0.0
    restarts: int = field(default=0)


class Supervisor:
    """Runs engine processes until told to stop; the exit status is the worst of theirs."""

    def __init__(self, argvs: Sequence[list[str]]):
        self.children = [Child(list(argv)) for argv in argvs]
        self.stopping = False

    def run(self) -> int:
        """Start every child, keep them running, and stop them all on SIGTERM or SIGINT."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
        for child in self.children:
            self._start(child)
        while not self.stopping:
            self._watch()
            time.sleep(0.2)
        return self._wait_all()

    def stop(self) -> None:
        """Forward a graceful stop to every child."""
        self.stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)

    def _start(self, child: Child) -> None:
        child.proc = subprocess.Popen(child.argv)
        log.info("engine process %d started: %s", child.proc.pid, " ".join(child.argv[3:6]))

    def _watch(self) -> None:
        now = time.monotonic()
        for child in self.children:
            proc = child.proc
            if proc is not None and proc.poll() is not None:
                log.error("engine process %d exited with status %d; starting it again in %.0f s",
                          proc.pid, proc.returncode, child.pause)
                child.proc, child.start_after = None, now + child.pause
                child.pause = min(2 * child.pause, MAX_RESTART_PAUSE_S)
            elif proc is None and now >= child.start_after:
                child.restarts += 1
                self._start(child)

    def _wait_all(self) -> int:
        worst = 0
        for child in self.children:
            if child.proc is not None:
                worst = max(worst, abs(child.proc.wait()))
        return worst


def child_argvs(argv: Sequence[str], n: int, owner_id: str, metrics_port: int | None) -> list[list[str]]:
    """The command line of each of ``n`` engine processes: ``argv`` with its own owner id and metrics port."""
    base = _without(list(argv), "--processes", "--owner-id", "--metrics-port")
    out = []
    for i in range(n):
        own = ["--owner-id", f"{owner_id}-{i}", "--processes", "1"]
        if metrics_port is not None:
            own += ["--metrics-port", str(metrics_port + i if metrics_port else 0)]
        out.append([sys.executable, "-m", "engine.cli.main", *base, *own])
    return out


def _without(argv: list[str], *flags: str) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out
