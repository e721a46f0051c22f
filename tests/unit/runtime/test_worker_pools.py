"""Which task types a remote worker of a pool runs, and a pool no task type names (a mistyped --pool)."""

from __future__ import annotations

import pytest

from engine import App
from engine.errors import ConfigError
from engine.runtime.remote.worker import served


def _app() -> App:
    app = App()
    for name, pool in (("render", "gpu"), ("encode", "gpu"), ("crunch", "cpu"), ("echo", None)):
        app.task(name, pool=pool)(lambda ctx, payload: payload)
    return app


def test_a_worker_runs_its_pools_task_types_and_the_default_pool_runs_those_naming_none() -> None:
    assert served(_app(), "gpu") == ["encode", "render"]
    assert served(_app(), "default") == ["echo"]


def test_a_pool_no_task_type_names_is_refused_naming_the_apps_pools() -> None:
    with pytest.raises(ConfigError) as refused:
        served(_app(), "gpuu")
    assert str(refused.value).startswith("--pool gpuu: no task type of this app runs in pool 'gpuu' "
                                         "(its pools: cpu, gpu; 'default': the task types that name no pool")
