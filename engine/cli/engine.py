"""``epochq engine run module:app``: run an engine instance until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import traceback

from engine.app import App
from engine.cli.common import add_connection_flags, settings_from
from engine.cli.common import port as tcp_port
from engine.cli.console import CONSOLE_FLAGS, add_console_flags, started_console, started_view
from engine.cli.view import add_keep_finished
from engine.domain.lanes import Lane
from engine.domain.timerouter import Windows
from engine.errors import ConfigError, TaskDefinitionError
from engine.runtime.kafka import default_owner_id
from engine.runtime.observe.logs import configure_logging


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``engine`` subcommand."""
    parser = sub.add_parser("engine", help="run an engine instance")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run the handlers of module:app until SIGTERM/SIGINT")
    run.add_argument("app", help="where the App lives, as module:attribute (e.g. myapp:app)")
    add_connection_flags(run)
    run.add_argument("--owner-id", help="this instance's name (default host-pid)")
    run.add_argument("--no-execute", action="store_true",
                     help="decide only: every task type goes to remote workers (pool 'default' unless it names one; "
                          "`epochq worker run`, docs/workers.md)")
    run.add_argument("--processes", default="1", metavar="N",
                     help="engine processes sharing the partitions (a consumer group of N members); 'auto': one per "
                          "core. One SIGTERM stops them all. With --metrics-port P, process i serves P+i")
    run.add_argument("--concurrency", type=int, default=None,
                     help="worker slots of the NORMAL lane (HIGH and LOW get half, BATCH a quarter)")
    run.add_argument("--slots", action="append", default=[], metavar="LANE=N",
                     help="worker slots of one lane, e.g. --slots BATCH=1 (repeatable)")
    run.add_argument("--grace", type=float, default=10.0,
                     help="seconds in-flight jobs get to finish when the engine stops or a rebalance moves their "
                          "partition; what still runs then is re-queued, not counted as an attempt "
                          "(docs/operations.md)")
    run.add_argument("--cancel-grace", type=float, default=10.0,
                     help="seconds a running job asked to stop (epochq cancel) may run on before it is given up")
    run.add_argument("--session-timeout-ms", type=int, default=6000,
                     help="consumer group session timeout: how soon a dead instance's partitions move")
    run.add_argument("--fifo", action="store_true",
                     help="serve tenants first come first served instead of by weight (benchmarks only)")
    run.add_argument("--log-level", default="INFO")
    run.add_argument("--log-format", choices=["text", "json"], default="text",
                     help="key=value text or one JSON object per line")
    run.add_argument("--metrics-port", type=tcp_port, default=None,
                     help="serve Prometheus metrics on this port, 1-65535 (docs/metrics.md)")
    run.add_argument("--metrics-addr", default="127.0.0.1", help="address the metrics endpoint binds (0.0.0.0: all)")
    run.add_argument("--dlq-alert-threshold", type=int, default=100,
                     help="dead-letter depth that sets epochq_dead_letter_alert and logs a warning (0: off)")
    run.add_argument("--horizon", type=float, default=60.0,
                     help="seconds ahead the time router holds timers in memory (docs/time.md)")
    run.add_argument("--sweep-interval", type=float, default=1.0,
                     help="seconds between promotion sweeps that top the in-memory timers up")
    run.add_argument("--overdue-interval", type=float, default=30.0,
                     help="seconds between overdue sweeps of the on-disk due index (the safety net)")
    run.add_argument("--standby", action="store_true",
                     help="keep warm copies of the partitions other instances own, so a takeover only catches up "
                          "(docs/operations.md); needs a state directory of its own")
    run.add_argument("--restore-process-min", type=int, default=100_000, metavar="EVENTS",
                     help="a partition whose store lacks at least this many events is restored by a process of its "
                          "own, one per core at a time, while the loop serves the others (0: always in the loop)")
    run.add_argument("--checkpoint-every", type=int, default=50_000, metavar="EVENTS",
                     help="write a checkpoint of a partition's write model once at least this many events (and more "
                          "than its store's keys) were folded since the last one (0: never; docs/architecture.md)")
    run.add_argument("--no-view", action="store_true",
                     help="keep no view in this state directory (by default a view process of its own folds every "
                          "partition there, so `jobs list`, `dlq list` and the console answer: docs/operations.md)")
    add_keep_finished(run)
    add_console_flags(run, "--console-port", "--console-host", "--console-token", "--console-read-only",
                      default_port=None)
    run.set_defaults(func=_run)


def load_app(ref: str) -> App:
    """The App object named by ``module:attribute``."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"app: expected module:attribute, got {ref!r}")
    sys.path.insert(0, "")
    try:
        app = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, TaskDefinitionError) as e:
        raise ConfigError(f"app: cannot load {ref!r}: {e}") from e
    except SyntaxError as e:  # the module's own text: where, and what
        raise ConfigError(f"app: cannot load {ref!r}: {type(e).__name__} at {e.filename}:{e.lineno}: {e.msg}") from e
    except Exception as e:  # the module's own code raised while it was imported: the user's to fix
        raise ConfigError(f"app: cannot load {ref!r}: importing it raised {_raised_at(e)}") from e
    if not isinstance(app, App):
        raise ConfigError(f"app: {ref!r} is a {type(app).__name__}, not an engine.App")
    return app


def _raised_at(error: Exception) -> str:
    """``Type at file:line: message`` of an exception, where it was raised (its traceback's innermost frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}: {error}"


def lane_slots(concurrency: int | None, pairs: list[str]) -> dict[Lane, int]:
    """Worker slots per lane from --concurrency and --slots LANE=N."""
    from engine.runtime.loop import DEFAULT_SLOTS

    slots = dict(DEFAULT_SLOTS)
    if concurrency is not None:
        if concurrency < 1:
            raise ConfigError(f"--concurrency: must be 1 or more worker slots, got {concurrency}")
        slots = {Lane.HIGH: max(1, concurrency // 2), Lane.NORMAL: concurrency,
                 Lane.LOW: max(1, concurrency // 2), Lane.BATCH: max(1, concurrency // 4)}
    for pair in pairs:
        name, _, n = pair.partition("=")
        try:
            lane, count = Lane(name.upper()), int(n)
        except ValueError:
            raise ConfigError(f"--slots: expected LANE=N with LANE in HIGH, NORMAL, LOW, BATCH; got {pair!r}") from None
        if lane is Lane.DEAD or count < 0:
            raise ConfigError(f"--slots: {pair!r}: give a lane of HIGH, NORMAL, LOW, BATCH and 0 or more slots")
        slots[lane] = count
    return slots


def windows(horizon_s: float, sweep_s: float, overdue_s: float) -> Windows:
    """The time router's windows from --horizon, --sweep-interval and --overdue-interval (seconds)."""
    try:
        return Windows(horizon_us=round(horizon_s * 1e6), sweep_interval_us=round(sweep_s * 1e6),
                       overdue_sweep_interval_us=round(overdue_s * 1e6))
    except ConfigError as e:
        flag = {"horizon_us": "--horizon", "sweep_interval_us": "--sweep-interval",
                "overdue_sweep_interval_us": "--overdue-interval"}
        name = str(e).split(":")[0].removeprefix("windows.")
        raise ConfigError(f"{flag.get(name, name)}: {str(e).split(': ', 1)[-1]}") from None


def _run(args: argparse.Namespace) -> int:
    from engine.runtime import supervisor

    configure_logging(args.log_level, args.log_format)
    lane_slots(args.concurrency, args.slots)  # a bad count fails here, once, not in every child
    processes = supervisor.process_count(args.processes)
    if processes > 1:
        if args.standby:
            raise ConfigError("--standby: the processes of --processes share one state directory, where each "
                              "would hold the others' stores; run standby instances with a --state-dir of their own")
        load_app(args.app)  # a typo fails here, once, not in every child
        owner = args.owner_id or default_owner_id()
        argvs = supervisor.child_argvs([*_without_console(sys.argv[1:]), "--no-view"], processes, owner,
                                       args.metrics_port)
        # one view and one console, in the supervisor: the children share them
        with started_view(args, settings_from(args)), started_console(args, settings_from(args)):
            return supervisor.Supervisor(argvs).run()
    return _run_one(args)


def _without_console(argv: list[str]) -> list[str]:
    """The command line without the console's flags (the supervisor serves the console, not each child)."""
    from engine.runtime.supervisor import _without

    return _without([a for a in argv if a != "--console-read-only"], *CONSOLE_FLAGS)


def _run_one(args: argparse.Namespace) -> int:
    from engine.runtime.observe.malloctuning import tune_malloc

    tune_malloc()  # before any thread allocates: engine/runtime/observe/malloctuning.py
    from engine.runtime.observe.gctuning import tune_for_latency
    from engine.runtime.loop import Engine, EngineOptions

    settings = settings_from(args)
    options = EngineOptions(lane_slots=lane_slots(args.concurrency, args.slots), grace_s=args.grace,
                            session_timeout_ms=args.session_timeout_ms, metrics_port=args.metrics_port,
                            metrics_addr=args.metrics_addr, dlq_alert_threshold=args.dlq_alert_threshold,
                            windows=windows(args.horizon, args.sweep_interval, args.overdue_interval),
                            standby=args.standby, bulk_restore_min=args.restore_process_min,
                            checkpoint_min_events=args.checkpoint_every,
                            cancel_grace_s=args.cancel_grace, execute=not args.no_execute)
    engine = Engine(load_app(args.app), settings, options, owner_id=args.owner_id)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: engine.stop())
    # the console before the freeze: its modules and templates join it
    with started_view(args, settings), started_console(args, settings):
        tune_for_latency()  # a whole process of its own: engine/runtime/observe/gctuning.py
        engine.run()
    return 0
