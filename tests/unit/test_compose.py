"""docker-compose.yml in step with the project: the broker version it runs, and every epochq service's
command an `epochq` command that exists (its parser accepts it), on the image ./Dockerfile builds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.app import App
from engine.broker import KAFKA_VERSION
from engine.cli.engine import load_app
from engine.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _epochq_services() -> dict[str, dict[str, Any]]:
    built = {s.get("image") for s in _services().values() if "build" in s}
    return {name: s for name, s in _services().items() if "build" in s or s.get("image") in built}


def test_the_broker_is_the_kafka_version_the_project_runs() -> None:
    assert _services()["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"


def test_the_tests_container_is_the_compose_broker_but_for_its_listeners() -> None:
    """tests/conftest.py runs the same image with the same settings where no broker is given and Docker answers."""
    from tests.conftest import CONTAINER_ENV, DEFAULT_IMAGE, container_listeners

    kafka = _services()["kafka"]
    assert DEFAULT_IMAGE == kafka["image"]
    listeners = container_listeners("localhost", 9092)
    composed = {key: str(value) for key, value in kafka["environment"].items()}
    assert {key: value for key, value in composed.items() if key not in listeners} == CONTAINER_ENV
    assert set(listeners) <= set(composed)


def test_there_is_an_engine_a_console_and_the_topics_they_need() -> None:
    commands = {name: s["command"][:2] for name, s in _epochq_services().items()}
    assert commands == {"topics": ["topics", "ensure"], "engine": ["engine", "run"], "console": ["console", "--host"]}
    depends = {name: s["depends_on"] for name, s in _epochq_services().items()}
    assert depends["topics"]["kafka"]["condition"] == "service_healthy"
    assert depends["engine"]["topics"]["condition"] == depends["console"]["topics"]["condition"] \
        == "service_completed_successfully"


@pytest.mark.parametrize("service", ["topics", "engine", "console"])
def test_each_epochq_service_runs_a_command_the_cli_has(service: str) -> None:
    command = _epochq_services()[service]["command"]
    assert all(isinstance(word, str) for word in command), command
    args = build_parser().parse_args(command)  # argparse exits (SystemExit) on a command or flag it lacks
    assert callable(args.func)


def test_the_engine_s_app_loads_from_the_image_s_files() -> None:
    ref = next(word for word in _epochq_services()["engine"]["command"] if ":" in word)
    assert isinstance(load_app(ref), App)
    assert "COPY examples ./examples" in DOCKERFILE.read_text()


def test_the_image_runs_epochq_and_copies_only_what_exists() -> None:
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["epochq"]' in text
    assert 'epochq = "engine.cli.main:run"' in (ROOT / "pyproject.toml").read_text()
    copied = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert copied and all((ROOT / path).exists() for paths in copied for path in paths)


def test_compose_itself_reads_the_file_where_it_is_installed() -> None:
    """``docker compose config`` (or the older ``docker-compose config``) needs no Docker engine: where one of
    them is installed, it validates the file as Compose does; the checks above hold without it."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        if subprocess.run([*argv, "version"], capture_output=True, check=False).returncode != 0:
            continue  # a docker client without the compose plugin
        checked = subprocess.run([*argv, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True,
                                 check=False)
        assert checked.returncode == 0, checked.stderr
