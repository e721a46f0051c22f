"""``epochq simulate``: replay a window of recorded submissions under other settings; recorded vs simulated waits."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.cli.common import add_connection_flags, print_json, settings_from, since_us
from engine.domain.lanes import Lane, parse_priority
from engine.domain.ratelimits import parse_rate
from engine.errors import ConfigError, ValidationError
from engine.runtime.loop.options import DEFAULT_SLOTS
from engine.questions.recorded import recorded_events
from engine.runtime.tenants import TenantDirectory
from engine.runtime.topics import partition_count
from engine.testing.virtual import Setup
from engine.testing.simulate import (
    MAX_PARTITIONS, MAX_SLOTS, WEIGHTS, Row, Scenario, Simulated, compare, failure_lines, recorded_jobs, simulate,
)

T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand."""
    parser = sub.add_parser(
        "simulate", help="replay recorded submissions under other weights, slots, rate limits, priorities",
        description="Reads the jobs submitted in [--since, --until) from the log, with every attempt's recorded "
                    "outcome and duration, and submits them again at the same instants to the engine's own rules "
                    "on a virtual clock, under the settings given. Prints, per tenant and task type, the "
                    "recorded and the simulated wait (ready to first start) p50/p99 and share of starts.")
    when = "15m, 2h, 1d (that long ago) or ISO-8601 (UTC if no zone)"
    parser.add_argument("--since", help=f"jobs submitted at or after: {when}")
    parser.add_argument("--until", help=f"jobs submitted before: {when}")
    parser.add_argument("--slots", action="append", default=[], metavar="LANE=N",
                        help=f"worker slots of a lane, across all engines, 0-{MAX_SLOTS} (default: one engine's)")
    parser.add_argument("--weight", action="append", default=[], metavar="TENANT=W",
                        help=f"a tenant's weight, {WEIGHTS[0]:g}-{WEIGHTS[1]:g} (default: the tenants table's)")
    parser.add_argument("--rate", action="append", default=[], metavar="TASK=RATE",
                        help="a task type's rate limit, e.g. email.send=10/s")
    parser.add_argument("--priority", action="append", default=[], metavar="TASK=P",
                        help="the priority every job of a task type gets (0-9 or an alias)")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help=f"job partitions, each with its own fair queues, 1-{MAX_PARTITIONS} (default: the "
                             "events topic's)")
    parser.add_argument("--app", help="module:attribute of the App whose retry policies and lanes apply")
    parser.add_argument("--json", action="store_true")
    add_connection_flags(parser)
    parser.set_defaults(func=_simulate)


@dataclass(frozen=True)
class Asked:
    """What the flags ask for, each checked against its bounds (docs/testing.md) before anything is read."""

    since: int | None
    until: int | None
    slots: dict[Lane, int]
    weights: dict[str, float]
    rates: dict[str, tuple[float, int]]
    priorities: dict[str, int]
    partitions: int | None


def _simulate(args: argparse.Namespace) -> int:
    asked = _asked(args)
    settings = settings_from(args)
    scenario = _scenario(asked, args.app, settings)
    jobs = recorded_jobs(recorded_events(settings), asked.since, asked.until)
    started = time.perf_counter()
    sim = simulate(jobs, scenario)
    seconds = time.perf_counter() - started
    rows = compare(jobs, sim, asked.until)
    speed = len(jobs) / seconds if seconds > 0 else 0.0
    if args.json:
        print_json({"jobs": len(jobs), "replay_seconds": round(seconds, 3), "jobs_per_second": round(speed),
                    "unstarted": sim.unstarted, "rows": [_json(r) for r in rows], **_failures_json(sim)})
        return 0
    if not jobs:
        print("no jobs submitted in the window")
        return 1
    _table(rows)
    for line in failure_lines(sim):
        print(f"simulated failures: {line}", file=sys.stderr)
    print(f"replayed {len(jobs)} jobs in {seconds:.2f} s ({speed:.0f} jobs/s)", file=sys.stderr)
    return 0


def _asked(args: argparse.Namespace) -> Asked:
    """The flags, checked: ConfigError (or ValidationError) naming the flag and its bounds."""
    since, until = since_us(args.since, "--since"), since_us(args.until, "--until")
    if since is not None and until is not None and until <= since:
        raise ConfigError(f"--until: must be after --since ({args.until!r} is not after {args.since!r})")
    if args.partitions is not None and not 1 <= args.partitions <= MAX_PARTITIONS:
        raise ConfigError(f"--partitions: must be from 1 to {MAX_PARTITIONS}, got {args.partitions}")
    return Asked(since, until, {_lane(k): _slots(k, v) for k, v in _pairs(args.slots, "--slots")},
                 {k: _weight(k, v) for k, v in _pairs(args.weight, "--weight")},
                 {k: (_named(parse_rate, "--rate", k, v), 1) for k, v in _pairs(args.rate, "--rate")},
                 {k: _named(parse_priority, "--priority", k, v) for k, v in _pairs(args.priority, "--priority")},
                 args.partitions)


def _scenario(asked: Asked, app: str | None, settings: Any) -> Scenario:
    tenants = TenantDirectory(settings)
    try:
        table = tenants.all()
    finally:
        tenants.close()
    weights = {t: c.weight for t, c in table.items()} | asked.weights
    max_queued = {t: c.max_queued for t, c in table.items() if c.max_queued is not None}
    policies = None
    if app:
        from engine.cli.engine import load_app

        policies = load_app(app).policies()
    partitions = asked.partitions if asked.partitions is not None else partition_count(settings)
    if partitions > MAX_PARTITIONS:
        raise ConfigError(f"--partitions: the events topic has {partitions} partitions, more than a replay takes "
                          f"({MAX_PARTITIONS}): give --partitions N")
    setup = Setup(lane_slots=dict(DEFAULT_SLOTS) | asked.slots, weights=weights, max_queued=max_queued,
                  partitions=partitions)
    return Scenario(setup, asked.rates, asked.priorities, policies)


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{flag}: expected NAME=VALUE, got {item!r}")
        out.append((key, value))
    return out


def _slots(lane: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_SLOTS:
        raise ConfigError(f"--slots: {lane}={text}: must be a whole number of slots from 0 to {MAX_SLOTS}")
    return int(text)


def _weight(tenant: str, text: str) -> float:
    least, most = WEIGHTS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not least <= value <= most:  # also NaN
        raise ConfigError(f"--weight: {tenant}={text}: must be a number from {least:g} to {most:g}")
    return value


def _named(parse: Callable[[str], T], flag: str, key: str, text: str) -> T:
    """``parse(text)``, its ValidationError naming the flag and the pair (``--rate: send=1e9/s: ...``)."""
    try:
        return parse(text)
    except ValidationError as e:
        reason = str(e).split(": ", 1)[-1]
        raise ValidationError(f"{flag}: {key}={text}: {reason}", flag.lstrip("-")) from None


def _lane(text: str) -> Lane:
    try:
        return Lane(text.upper())
    except ValueError:
        raise ValidationError(f"--slots: unknown lane {text!r} (HIGH, NORMAL, LOW, BATCH)", "slots") from None


def _failures_json(sim: Simulated) -> dict[str, Any]:
    return {"failures": [{"task_type": t, "error": error, "attempts": n}
                         for (t, error), n in sorted(sim.failures.items())],
            "dead_lettered": dict(sorted(sim.dead.items())), "rejected": dict(sorted(sim.rejected.items()))}


def _json(row: Row) -> dict[str, Any]:
    return {"tenant": row.tenant, "task_type": row.task_type, "jobs": row.jobs,
            "recorded": {"p50_ms": row.recorded_p50_ms, "p99_ms": row.recorded_p99_ms,
                         "share": round(row.recorded_share, 4)},
            "simulated": {"p50_ms": row.simulated_p50_ms, "p99_ms": row.simulated_p99_ms,
                          "share": round(row.simulated_share, 4)}}


def _table(rows: list[Row]) -> None:
    print(f"{'tenant':16} {'task type':20} {'jobs':>6}   {'wait p50/p99 ms: recorded':>27} {'simulated':>19}"
          f"   {'share: rec':>10} {'sim':>6}")
    for r in rows:
        print(f"{r.tenant[:16]:16} {r.task_type[:20]:20} {r.jobs:6d}   {_ms(r.recorded_p50_ms):>13} "
              f"{_ms(r.recorded_p99_ms):>13} {_ms(r.simulated_p50_ms):>9} {_ms(r.simulated_p99_ms):>9}"
              f"   {r.recorded_share:10.1%} {r.simulated_share:6.1%}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
