"""The tenants table against a real broker: read whole, followed, tombstones, validation, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.config import Settings, load_settings
from engine.errors import ValidationError
from engine.runtime.tenants import TenantDirectory, remove_tenant, set_tenant
from engine.runtime.topics import ensure_topics
from tests.integration.conftest import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tenant_settings(bootstrap: str, unique_ns: str) -> Settings:
    """Settings for a fresh namespace whose topics exist."""
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns)
    ensure_topics(settings, partitions=3)
    return settings


@pytest.fixture
def directory(tenant_settings: Settings) -> Iterator[TenantDirectory]:
    """A directory that read the (empty) table at start, closed afterwards."""
    with TenantDirectory(tenant_settings) as d:
        yield d


def settled(directory: TenantDirectory, check: Callable[[TenantDirectory], bool], timeout: float = 15.0) -> None:
    """Refresh until ``check`` holds; fail after ``timeout`` seconds."""
    def refreshed() -> bool:
        directory.refresh()
        assert check(directory), f"directory never satisfied the check: {directory.all()}"
        return True

    eventually(refreshed, timeout, every=0.05)


def test_set_read_whole_update_and_remove(tenant_settings: Settings, directory: TenantDirectory) -> None:
    assert directory.all() == {}
    set_tenant(tenant_settings, "acme", 2.0, max_queued=100, product="mail")
    set_tenant(tenant_settings, "globex", 5.0, product="mail")
    set_tenant(tenant_settings, "initech", 0.5)
    with TenantDirectory(tenant_settings) as second:
        assert sorted(second.all()) == ["acme", "globex", "initech"]
        assert second.weight("acme") == 2.0 and second.max_queued("acme") == 100
        assert second.weight("unknown") == 1.0 and second.max_queued("unknown") is None
        assert second.tenants_of_product("mail") == ["acme", "globex"]
    set_tenant(tenant_settings, "acme", 3.0)
    settled(directory, lambda d: d.weight("acme") == 3.0)
    assert directory.max_queued("acme") is None and directory.weight("globex") == 5.0
    remove_tenant(tenant_settings, "initech")
    settled(directory, lambda d: "initech" not in d.all())
    with TenantDirectory(tenant_settings) as third:
        assert sorted(third.all()) == ["acme", "globex"] and third.weight("initech") == 1.0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"weight": 0.0}, "weight"), ({"weight": float("nan")}, "weight"), ({"weight": -2.0}, "weight"),
    ({"weight": 1.0, "max_queued": 0}, "max_queued"), ({"weight": 1.0, "tenant_id": ""}, "tenant_id"),
])
def test_bad_configs_are_refused_naming_the_field(bootstrap: str, unique_ns: str, kwargs: dict[str, object],
                                                  field: str) -> None:
    """Validation comes before any write: nothing reaches the topic."""
    settings = load_settings(bootstrap=bootstrap, namespace=unique_ns)
    args = {"tenant_id": "acme", **kwargs}
    with pytest.raises(ValidationError, match=field):
        set_tenant(settings, **args)  # type: ignore[arg-type]


def test_cli_set_and_list(tenant_settings: Settings) -> None:
    flags = ["--bootstrap", tenant_settings.require_bootstrap(), "--namespace", tenant_settings.namespace]
    epochq = [sys.executable, "-m", "engine.cli.main", "tenants"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([*epochq, "set", "acme", "--weight", "4", "--max-queued", "10", *flags],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([*epochq, "list", "--json", *flags], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    [acme] = json.loads(listed.stdout)
    assert acme["tenant_id"] == "acme" and acme["weight"] == 4.0 and acme["max_queued"] == 10
    bad = subprocess.run([*epochq, "set", "acme", "--weight", "0", *flags], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "weight" in bad.stderr
