"""What users see: one wall clock, and a demo built only on the public API (the client, the local
broker's API, the ``epochq`` command)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {"engine", "engine.app", "engine.client", "engine.broker", "engine.errors"}
"""What an example may import of epochq (engine/__init__.py's names, and the local broker's API)."""


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_demo_imports_only_the_public_api() -> None:
    for name in ("demo.py", "demo_output.py"):
        ours = {m for m in _imports(ROOT / "examples" / name)
                if m.split(".")[0] in ("engine", "projections")}
        assert ours <= PUBLIC, (name, ours - PUBLIC)


def test_now_us_is_defined_once() -> None:
    defined = [str(path.relative_to(ROOT)) for package in ("engine", "projections")
               for path in sorted((ROOT / package).rglob("*.py"))
               for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name == "now_us"]
    assert defined == ["engine/clock.py"]


def test_the_old_places_of_now_us_are_the_clock() -> None:
    from engine import clock, commands
    from engine.runtime.loop import engine, heartbeat

    assert commands.now_us is clock.now_us is engine.now_us is heartbeat.now_us
