"""Every subcommand with careless input, against a real broker: never a traceback, one line saying what is wrong."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

from engine.config import Settings
from tests.integration.conftest import ROOT

NONE = "{ns}-none"  # a namespace whose topics do not exist
CASES: list[tuple[str, ...]] = [
    ("topics", "ensure", "--partitions", "0", "--namespace", NONE),
    ("topics", "ensure", "--replication", "-3", "--namespace", NONE),
    ("topics", "describe", "--namespace", NONE),
    ("engine", "run", "nope.module:app"),
    ("engine", "run", "tests.integration.apps"),
    ("engine", "run", "tests.integration.apps:app", "--slots", "BOGUS=3"),
    ("engine", "run", "tests.integration.apps:app", "--processes", "lots"),
    ("engine", "run", "tests.integration.apps:app", "--concurrency", "-3"),
    ("engine", "run", "tests.integration.apps:app", "--concurrency", "0"),
    ("engine", "run", "tests.integration.apps:app", "--slots", "BATCH=-1"),
    ("submit", "x", "--tenant", "a", "--payload", "{bad json}"),
    ("submit", "x", "--tenant", "a", "--payload", "@/no/such/file.json"),
    ("submit", "x", "--tenant", "a", "--run-at", "yesterday"),
    ("submit", "x", "--tenant", "a", "--delay", "-5"),
    ("submit", "x", "--tenant", "a", "--lane", "SIDEWAYS"),
    ("submit", "x", "--tenant", "a", "--priority", "99"),
    ("submit", "x", "--tenant", "a", "--namespace", NONE),
    ("status", "not-a-job"),
    ("status", "not-a-job", "--namespace", NONE),
    ("history", ""),
    ("dlq", "list", "--since", "yesterday"),
    ("dlq", "list", "--since", "+5m"),
    ("jobs", "list", "--until", "in 2h"),
    ("dlq", "show", "nope"),
    ("dlq", "replay", "--reason", "x"),
    ("dlq", "replay", "nope", "--reason", "x"),
    ("projections", "rebuild"),
    ("tenants", "set", "a", "--weight", "-1"),
    ("tenants", "set", "", "--weight", "1"),
    ("tenants", "set", "a", "--weight", "1", "--max-queued", "0"),
    ("tenants", "remove", "nope"),
    ("audit", "--tenant", "a", "--since", "yesterday", "--format", "jsonl"),
    ("audit", "--tenant", "a", "--format", "jsonl", "--out", "/nonexistent/dir/x.jsonl"),
    ("audit", "--tenant", "a", "--format", "xml"),
    ("schedules", "add", "s", "--task", "x", "--cron", "bad cron", "--tenant", "a"),
    ("schedules", "add", "s", "--task", "x", "--cron", "* * * * *", "--tenant", "a", "--tz", "Mars/Olympus"),
    ("schedules", "add", "s", "--task", "x", "--cron", "* * * * *", "--tenant", "a", "--payload", "[1,"),
    ("schedules", "show", "nope"),
    ("schedules", "show", "nope", "--next", "-5"),
    ("schedules", "pause", ""),
    ("reschedule", "j", "--run-at", "yesterday"),
    ("reschedule", "j", "--delay", "-1"),
    ("reschedule", "", "--delay", "1"),
    ("lateness", "--since", "nope"),
    ("cancel", "", "--wait", "1"),
    ("cancel", "nope", "--wait", "-1"),
    ("limits", "set", "x", "--rate", "fast"),
    ("limits", "set", "x", "--rate", "0/s"),
    ("limits", "set", "x", "--rate", "10/s", "--burst", "0"),
    ("limits", "set", "", "--rate", "1/s"),
    ("limits", "clear", "x", "--namespace", NONE),
    ("reprioritize", "j", "urgent"),
    ("reprioritize", "", "5"),
    ("reprioritize", "j", "5", "--wait", "-1"),
    ("submit", "x", "--tenant", "a", "--wait", "--timeout", "-1"),
    ("submit", "x", "--tenant", "a", "--wait", "--timeout", "nan"),
    ("pause", "x", "--wait", "-1"),
    ("resume", "x", "--wait", "inf"),
    ("purge", "queued", "--reason", "x", "--wait", "nan"),
    ("reschedule", "j", "--delay", "1", "--tenant", "a", "--wait", "-2"),
    ("no-such-command",),
]


def run(settings: Settings, state: Path, args: tuple[str, ...]) -> tuple[tuple[str, ...], int, list[str]]:
    ns = settings.namespace
    args = tuple(a.replace("{ns}", ns) for a in args)
    own_ns = () if "--namespace" in args else ("--namespace", ns)
    flags = [] if args[0] == "no-such-command" else ["--bootstrap", settings.require_bootstrap(), "--state-dir",
                                                     str(state), *own_ns]
    done = subprocess.run([sys.executable, "-m", "engine.cli.main", *args, *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "EPOCHQ_TRACEBACK": "0"})
    ours = [line for line in done.stderr.splitlines() if not line.startswith("%")]  # librdkafka's own lines aside
    return args, done.returncode, ours


def test_every_subcommand_answers_careless_input_in_one_line(settings: Settings, tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda a: run(settings, tmp_path / "state", a), CASES))
    problems = []
    for args, status, lines in results:
        errors = [line for line in lines if not line.startswith(("usage:", " "))]  # argparse's usage text aside
        if any("Traceback" in line for line in lines) or status in (0, 70) or len(errors) != 1 \
                or not errors[0].startswith("epochq"):
            problems.append(f"{' '.join(args)} -> {status}: {lines}")
    assert not problems, "\n".join(problems)
