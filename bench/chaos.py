"""Chaos: jobs lost, doubled or run again when an engine is killed or frozen, or a leader broker dies.

Three scenarios, ``--trials`` each (default 3); every trial gets a fresh namespace of 6
partitions under a steady load: ``--rate`` jobs a second (default 20) of ``bench.apps``'
``work`` handler (a 50 ms sleep) for ``--seconds`` (default 30), from a client in this process.
Engines are ``epochq engine run bench.apps:app`` processes with default settings (6 s session).

- ``kill``: engines A and B share the partitions; A gets ``kill -9`` ``--at`` s into the load.
- ``zombie``: A gets SIGSTOP ``--at`` s in and stays frozen past its session timeout until B
  holds all of A's partitions (plus 1 s), then SIGCONT: its late writes must be refused (the
  broker fences its transactions) and it must step down, not exit.
- ``broker``: one engine on a 3-node local cluster (a broker home of its own; topics with
  replication 3, min ISR 2); the node leading most events partitions gets SIGKILL ``--at`` s
  in and is started again ``--restart-after`` s later with ``broker.restart_node``.

After the load the bench waits (at most ``--drain`` s) until every acknowledged job has a
terminal event, then reads the events topic (bench/chaos_log.py). Per trial: jobs submitted
(acknowledged), lost (no terminal event), doubles (more than one terminal event),
re-executions (``JobStarted`` beyond a job's first), fenced events in the log (written but
ignored by the fold), the takeover time (signal → first job started by the other engine on a
partition that moved) and the longest pause between consecutive completions. Then one line of
medians per scenario.

Usage: python bench/chaos.py [--trials 3] [--scenarios kill,zombie,broker] [--rate 20] [--seconds 30]
The 1-node broker is the running local one (``EPOCHQ_BROKER_HOME``) or one started for the run.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, UTC
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient

from bench.chaos_log import Figures, LogReader, count
from bench.harness import local_broker
from bench.takeover import Engine, wait
from engine import broker
from engine.client import Client
from engine.config import Settings, load_settings
from engine.errors import KafkaUnavailableError
from engine.runtime.topics import ensure_topics

PARTITIONS = 6
JOB = {"task_type": "work", "payload": {"seconds": 0.05}}


class Load:
    """Submits ``rate`` jobs a second from a thread for ``seconds``; the ids the broker acknowledged."""

    def __init__(self, settings: Settings, rate: float, seconds: float):
        self.settings, self.rate, self.seconds = settings, rate, seconds
        self.ids: set[str] = set()
        self.refused = 0
        self.errors: Counter[str] = Counter()  # why submits were refused: error type and first words
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Load:
        self.thread.start()
        return self

    def join(self) -> None:
        self.thread.join()

    def _run(self) -> None:
        with Client(self.settings) as client:
            began, sent = time.monotonic(), 0
            while (elapsed := time.monotonic() - began) < self.seconds:
                due = int(elapsed * self.rate) - sent
                if due > 0:
                    self._submit(client, [{**JOB, "tenant": f"t{(sent + i) % 4}"} for i in range(due)])
                    sent += due
                time.sleep(0.05)

    def _submit(self, client: Client, jobs: list[dict[str, object]]) -> None:
        try:
            self.ids.update(h.job_id for h in client.submit_many(jobs))
        except Exception as e:  # noqa: BLE001 - not acknowledged (broker down): not counted as submitted
            self.refused += len(jobs)
            self.errors[f"{type(e).__name__}: {str(e)[:200]}"] += 1

    def refusals(self) -> str:
        """How many submits were refused, and the most common reason."""
        if not self.refused:
            return "0 submits refused"
        (why, times), = self.errors.most_common(1)
        return f"{self.refused} submits refused ({times}× {why})"


def now_us() -> int:
    return time.time_ns() // 1000


def fresh_settings(bootstrap: str, replication: int = 1) -> Settings:
    """A new namespace (6 partitions) with its topics, and a temporary state directory."""
    settings = load_settings(bootstrap=bootstrap, namespace=f"chaos{time.time_ns() // 1000}",
                             state_dir=tempfile.mkdtemp(prefix="epochq-chaos-"))
    for attempt in range(3):  # on 3 nodes a broker's metadata may lag the creation for a moment
        try:
            ensure_topics(settings, partitions=PARTITIONS, replication=replication)
            return settings
        except (ValueError, KafkaUnavailableError):
            if attempt == 2:
                raise
            time.sleep(1)
    return settings


def settle(settings: Settings, load: Load, since_us: int, moved: set[int], new_owner: str | None,
           drain: float) -> Figures:
    """Wait until every acknowledged job ended (at most ``drain`` s), then count from the log."""
    reader = LogReader(settings, PARTITIONS)
    try:
        began = time.monotonic()
        reader.catch_up()
        while not load.ids <= reader.terminal_ids() and time.monotonic() - began < drain:
            time.sleep(1)
            reader.catch_up()
        if not load.ids <= reader.terminal_ids():
            print(f"    (jobs still without an end after waiting {drain:.0f} s: counted as lost)", flush=True)
        return count(reader, load.ids, since_us, moved, new_owner)
    finally:
        reader.close()


@contextmanager
def engine_pair(settings: Settings, trial: int) -> Iterator[tuple[Engine, Engine]]:
    """Engines A and B sharing the partitions; both stopped afterwards (a frozen one is thawed first)."""
    a = Engine(settings, f"a{trial}")
    b = Engine(settings, f"b{trial}")
    try:
        wait(lambda: len(a.owned() | b.owned()) == PARTITIONS and bool(a.owned()) and bool(b.owned())
             and not a.owned() & b.owned(), 300, "A and B to share the partitions")
        yield a, b
    finally:
        for engine in (a, b):
            if engine.proc.poll() is None:
                engine.proc.send_signal(signal.SIGCONT)
            engine.stop()


def kill_trial(settings: Settings, args: argparse.Namespace, trial: int) -> tuple[Figures, str]:
    with engine_pair(settings, trial) as (a, b):
        load = Load(settings, args.rate, args.seconds).start()
        time.sleep(args.at)
        moved, at_us = a.owned(), now_us()
        a.proc.send_signal(signal.SIGKILL)
        load.join()
        figures = settle(settings, load, at_us, moved, b.name, args.drain)
        return figures, f"A held {sorted(moved)}; {load.refusals()}; namespace {settings.namespace}"


def zombie_trial(settings: Settings, args: argparse.Namespace, trial: int) -> tuple[Figures, str]:
    with engine_pair(settings, trial) as (a, b):
        load = Load(settings, args.rate, args.seconds).start()
        time.sleep(args.at)
        moved, at_us = a.owned(), now_us()
        a.proc.send_signal(signal.SIGSTOP)
        frozen = wait(lambda: moved <= b.owned(), 300, "B to take the zombie's partitions") + 1
        time.sleep(1)
        mark = len(a.log_path.read_text())
        a.proc.send_signal(signal.SIGCONT)
        load.join()
        figures = settle(settings, load, at_us, moved, b.name, args.drain)
        time.sleep(2)
        return figures, f"A held {sorted(moved)}, frozen {frozen:.1f} s; " + zombie_verdict(a, mark)


def zombie_verdict(engine: Engine, mark: int) -> str:
    """What the thawed engine did: how it stepped down (and stayed up), or that it exited."""
    after = [line for line in engine.log_path.read_text()[mark:].splitlines() if " epochq." in line]
    if engine.proc.poll() is not None:
        return f"zombie EXITED with code {engine.proc.returncode}: {(after or ['(no output)'])[-1][:200]}"
    refused = sum(bool(re.search(r"partition \d+ fenced at epoch", line)) for line in after)
    lost = sum("dropped (lost)" in line for line in after)
    withheld = sum("dropping result of job" in line for line in after)
    return (f"zombie stayed up: {refused} partitions' late writes refused by the broker (fenced), "
            f"{lost} dropped on losing the group first, {withheld} results withheld")


def broker_trial(settings: Settings, args: argparse.Namespace, trial: int, home: Path) -> tuple[Figures, str]:
    engine = Engine(settings, f"solo{trial}")
    try:
        wait(lambda: len(engine.owned()) == PARTITIONS, 300, "the engine to own every partition")
        load = Load(settings, args.rate, args.seconds).start()
        time.sleep(args.at)
        leader, at_us = leading_node(settings), now_us()
        broker.stop_node(leader, hard=True, home=home)
        time.sleep(args.restart_after)
        began = time.monotonic()
        broker.restart_node(leader, home=home, timeout=300)
        back = time.monotonic() - began
        load.join()
        figures = settle(settings, load, at_us, set(), None, args.drain)
        up = "engine stayed up" if engine.proc.poll() is None else f"ENGINE EXITED ({engine.proc.returncode})"
        up += f"; namespace {settings.namespace}, engine log {engine.log_path}"
        return figures, (f"node {leader} killed, restarted {args.restart_after:.0f} s later (ready in {back:.1f} s); "
                         f"{load.refusals()}; {up}")
    finally:
        engine.stop()


def leading_node(settings: Settings) -> int:
    """The broker leading most partitions of the events topic."""
    admin = AdminClient({"bootstrap.servers": settings.require_bootstrap()})
    topic = settings.events_topic
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return Counter(p.leader for p in parts.values()).most_common(1)[0][0]


def show(name: str, trial: int, f: Figures, note: str) -> None:
    take = f"{f.takeover_s:.1f} s" if f.takeover_s is not None else "n/a"
    print(f"  {name} #{trial}: {f.submitted} submitted, {f.lost} lost, {f.doubles} double terminal, "
          f"{f.reexecuted} re-executions{_where(f)}, {f.fenced} fenced events, takeover {take}, "
          f"longest pause in completions {f.pause_s:.1f} s — {note}", flush=True)
    for story in f.lost_story:
        print(f"    lost: {story}", flush=True)
    for story in f.reexecuted_story:
        print(f"    run again: {story}", flush=True)


def _where(f: Figures) -> str:
    """Which partitions the re-executions were on, when there were any."""
    if not f.reexecuted_by_partition:
        return ""
    return " (partition " + ", ".join(f"{p}: {n}" for p, n in f.reexecuted_by_partition) + ")"


def summary(name: str, results: list[Figures]) -> None:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):g}" if values else "n/a"

    takes = [f.takeover_s for f in results if f.takeover_s is not None]
    take = f"{med([round(t, 1) for t in takes])} s" if takes else "n/a"
    print(f"{name} ({len(results)} trials), medians: {med([f.submitted for f in results])} submitted, "
          f"{med([f.lost for f in results])} lost, {med([f.doubles for f in results])} double terminal, "
          f"{med([f.reexecuted for f in results])} re-executions, takeover {take}, "
          f"longest pause {med([round(f.pause_s, 1) for f in results])} s", flush=True)


def run_scenario(name: str, trials: int, trial: Callable[[int], tuple[Figures, str]]) -> None:
    print(f"{name}:", flush=True)
    results = []
    for n in range(1, trials + 1):
        figures, note = trial(n)
        show(name, n, figures, note)
        results.append(figures)
    summary(name, results)


def run_broker_scenario(args: argparse.Namespace) -> None:
    home = Path(tempfile.mkdtemp(prefix="epochq-chaos-cluster-"))
    if args.keep_cluster:
        print(f"the 3-node cluster stays up: EPOCHQ_BROKER_HOME={home} epochq broker stop", flush=True)
    try:
        began = time.monotonic()
        info = broker.start(nodes=3, home=home, timeout=600)
        print(f"3-node cluster at {info.bootstrap} ready in {time.monotonic() - began:.0f} s", flush=True)
        run_scenario("broker", args.trials,
                     lambda n: broker_trial(fresh_settings(info.bootstrap, replication=3), args, n, home))
    finally:
        if not args.keep_cluster:
            broker.stop(home=home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--scenarios", default="kill,zombie,broker", help="comma-separated: kill, zombie, broker")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs submitted per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts")
    parser.add_argument("--at", type=float, default=5.0, help="seconds into the load of the kill or SIGSTOP")
    parser.add_argument("--restart-after", type=float, default=10.0, help="broker: seconds before the restart")
    parser.add_argument("--drain", type=float, default=120.0, help="seconds to wait for the jobs to end")
    parser.add_argument("--keep-cluster", action="store_true", help="broker: leave the 3-node cluster running")
    args = parser.parse_args()
    scenarios = [s.strip() for s in args.scenarios.split(",")]
    print(f"chaos {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} cores; {args.trials} trials, "
          f"{args.rate:g} jobs/s for {args.seconds:g} s", flush=True)
    with local_broker() as bootstrap:
        for name, trial in (("kill", kill_trial), ("zombie", zombie_trial)):
            if name in scenarios:
                run_scenario(name, args.trials, lambda n, t=trial: t(fresh_settings(bootstrap), args, n))
    if "broker" in scenarios:
        run_broker_scenario(args)


if __name__ == "__main__":
    main()
