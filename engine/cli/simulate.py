"""``epochq simulate``: replay a window of recorded submissions under other settings; recorded vs simulated waits."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from engine.cli.common import add_connection_flags, print_json, settings_from, since_us
from engine.domain.lanes import Lane, parse_priority
from engine.domain.ratelimits import parse_rate
from engine.errors import ConfigError, ValidationError
from engine.runtime.loop.options import DEFAULT_SLOTS
from engine.questions.recorded import recorded_events
from engine.runtime.tenants import TenantDirectory
from engine.runtime.topics import partition_count
from engine.testing.loop import Setup
from engine.testing.simulate import Row, Scenario, compare, recorded_jobs, simulate


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
                        help="worker slots of a lane, across all engines (default: one engine's)")
    parser.add_argument("--weight", action="append", default=[], metavar="TENANT=W",
                        help="a tenant's weight (default: the tenants table's)")
    parser.add_argument("--rate", action="append", default=[], metavar="TASK=RATE",
                        help="a task type's rate limit, e.g. email.send=10/s")
    parser.add_argument("--priority", action="append", default=[], metavar="TASK=P",
                        help="the priority every job of a task type gets (0-9 or an alias)")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="job partitions, each with its own fair queues (default: the events topic's)")
    parser.add_argument("--app", help="module:attribute of the App whose retry policies and lanes apply")
    parser.add_argument("--json", action="store_true")
    add_connection_flags(parser)
    parser.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    scenario = _scenario(args, settings)
    since, until = since_us(args.since, "--since"), since_us(args.until, "--until")
    jobs = recorded_jobs(recorded_events(settings), since, until)
    started = time.perf_counter()
    sim = simulate(jobs, scenario)
    seconds = time.perf_counter() - started
    rows = compare(jobs, sim, until)
    speed = len(jobs) / seconds if seconds > 0 else 0.0
    if args.json:
        print_json({"jobs": len(jobs), "replay_seconds": round(seconds, 3), "jobs_per_second": round(speed),
                    "unstarted": sim.unstarted, "rows": [_json(r) for r in rows]})
        return 0
    if not jobs:
        print("no jobs submitted in the window")
        return 1
    _table(rows)
    print(f"replayed {len(jobs)} jobs in {seconds:.2f} s ({speed:.0f} jobs/s)", file=sys.stderr)
    return 0


def _scenario(args: argparse.Namespace, settings: Any) -> Scenario:
    tenants = TenantDirectory(settings)
    try:
        table = tenants.all()
    finally:
        tenants.close()
    weights = {t: c.weight for t, c in table.items()} | {k: _number(v, "--weight") for k, v in _pairs(args.weight)}
    max_queued = {t: c.max_queued for t, c in table.items() if c.max_queued is not None}
    slots = dict(DEFAULT_SLOTS) | {_lane(k): int(_number(v, "--slots")) for k, v in _pairs(args.slots)}
    rates = {k: (parse_rate(v), 1) for k, v in _pairs(args.rate)}
    priorities = {k: parse_priority(v if not v.isdigit() else int(v)) for k, v in _pairs(args.priority)}
    policies = None
    if args.app:
        from engine.cli.engine import load_app

        policies = load_app(args.app).policies()
    partitions = args.partitions if args.partitions is not None else partition_count(settings)
    if partitions < 1:
        raise ConfigError(f"--partitions: must be >= 1, got {partitions}")
    setup = Setup(lane_slots=slots, weights=weights, max_queued=max_queued, partitions=partitions)
    return Scenario(setup, rates, priorities, policies)


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"expected NAME=VALUE, got {item!r}")
        out.append((key, value))
    return out


def _number(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag}: not a number: {text!r}") from None
    if not value > 0:
        raise ConfigError(f"{flag}: must be > 0, got {text!r}")
    return value


def _lane(text: str) -> Lane:
    try:
        return Lane(text.upper())
    except ValueError:
        raise ValidationError(f"--slots: unknown lane {text!r} (HIGH, NORMAL, LOW, BATCH)", "slots") from None


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
