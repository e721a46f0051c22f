"""Store locks with real engine processes on a real broker: a live store is never rebuilt under its writer."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from projections.lock import StoreLock, holder_of
from projections.store import store_path
from tests.integration.conftest import ROOT, eventually, start_engine


def rebuild(settings: Settings, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``epochq projections rebuild ARGS`` on ``state_dir``, as an operator would type it."""
    cmd = [sys.executable, "-m", "engine.cli.main", "projections", "rebuild", *args, "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(state_dir)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def holders(settings: Settings, state_dir: Path) -> dict[int, str | None]:
    """Who holds the lock of each of the 3 stores in ``state_dir``, as the lock files say."""
    return {p: holder_of(store_path(state_dir, settings.namespace, p)) for p in range(3)}


def run_jobs(client: Client, n: int) -> set[int]:
    """Submit ``n`` no-op jobs over three tenants, wait for all to complete; the partitions they used."""
    handles = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{i % 3}"} for i in range(n)])
    for handle in handles:
        assert handle.wait(timeout=60).status == "completed"
    return {h.partition for h in handles}


def test_rebuild_refuses_a_store_a_running_engine_holds_and_works_once_it_stopped(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    assert run_jobs(client, 60) == {0, 1, 2}
    assert all(h is not None and h.startswith("engine a (pid ") for h in holders(settings, a.state_dir).values())

    refused = rebuild(settings, a.state_dir, "--partition", "1")
    assert refused.returncode == 3, refused
    line = refused.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    store = store_path(a.state_dir, settings.namespace, 1)
    assert f"partition 1: the store at {store} is held by engine a (pid {a.proc.pid})" in line, line
    assert refused.stdout == "" and not store.with_name("p0001.rebuild").exists()
    everything = rebuild(settings, a.state_dir, "--all")
    assert everything.returncode == 3 and "partition 0" in everything.stderr, everything

    verified = rebuild(settings, a.state_dir, "--all", "--verify")  # read-only: works under the live engine
    assert verified.returncode == 0, verified
    assert verified.stdout.count(": match (") == 3, verified.stdout
    run_jobs(client, 30)  # the engine never noticed

    assert a.stop() == 0
    assert all(h is None for h in holders(settings, a.state_dir).values())
    done = rebuild(settings, a.state_dir, "--partition", "1")
    assert done.returncode == 0 and "partition 1: rebuilt up to offset" in done.stdout, done
    again = rebuild(settings, a.state_dir, "--partition", "1", "--verify")
    assert again.returncode == 0 and "partition 1: match (" in again.stdout, again

    b = start_engine(engines, settings, "a2", tmp_path, extra=("--state-dir", str(a.state_dir)))
    b.wait_active(3)  # the rebuilt store opens cleanly (no corruption)
    run_jobs(client, 30)


def test_an_engine_waits_for_a_store_someone_else_holds_then_takes_it(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    state_dir = tmp_path / "state-a"
    held = StoreLock.acquire(store_path(state_dir, settings.namespace, 1), "epochq projections rebuild (pid 4242)")
    try:
        a = start_engine(engines, settings, "a", tmp_path)
        a.wait_active(2)
        eventually(lambda: "partition 1: waiting for its store" in a.logs(), 30, "the engine to say it waits")
        assert "held by epochq projections rebuild (pid 4242)" in a.logs()
        assert a.owned() == {0, 2} and a.proc.poll() is None
    finally:
        held.release()
    a.wait_active(3)
    assert a.owned() == {0, 1, 2}
    assert run_jobs(client, 60) == {0, 1, 2}
    assert a.logs().count("partition 1: waiting for its store") == 1  # said once, not every retry


def test_a_standby_holds_the_locks_of_its_copies_and_hands_them_over(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, extra=("--standby",))
    b.wait_active(1)
    run_jobs(client, 30)
    followed = a.owned()
    assert followed and not followed & b.owned()

    def copies_locked() -> bool:
        seen = holders(settings, b.state_dir)
        return all((seen[p] or "").startswith(f"standby copy of b (pid {b.proc.pid})") for p in followed)

    eventually(copies_locked, 30, "b's copies to be locked by its standby")
    owned_by_b = b.owned()
    assert owned_by_b and all((holders(settings, b.state_dir)[p] or "").startswith("engine b ") for p in owned_by_b)
    p = min(followed)
    refused = rebuild(settings, b.state_dir, "--partition", str(p))
    assert refused.returncode == 3 and f"held by standby copy of b (pid {b.proc.pid})" in refused.stderr, refused

    a.signal(signal.SIGKILL)
    eventually(lambda: b.owned() == {0, 1, 2}, 60, "b to take every partition over")
    seen = holders(settings, b.state_dir)
    assert all(re.fullmatch(rf"engine b \(pid {b.proc.pid}\)", seen[q] or "") for q in range(3)), seen
    run_jobs(client, 30)


def test_processes_sharing_a_state_directory_each_lock_their_own_stores(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    group = start_engine(engines, settings, "pair", tmp_path, extra=("--processes", "2"))
    group.wait_active(3)
    eventually(lambda: "as pair-0" in group.logs() and "as pair-1" in group.logs(), 60,
               "both members to own partitions")
    assert run_jobs(client, 60) == {0, 1, 2}

    def members() -> set[str]:
        return {re.sub(r" \(pid \d+\)$", "", h or "") for h in holders(settings, group.state_dir).values()}

    eventually(lambda: members() == {"engine pair-0", "engine pair-1"}, 30, "each member to lock the stores it owns")
    pids = {int(m) for h in holders(settings, group.state_dir).values() for m in re.findall(r"pid (\d+)", h or "")}
    assert len(pids) == 2 and group.proc.pid not in pids  # the children hold them, not the supervisor
    refused = rebuild(settings, group.state_dir, "--all")
    assert refused.returncode == 3 and "held by engine pair-" in refused.stderr, refused

    group.signal(signal.SIGTERM)
    assert group.proc.wait(40) == 0
    assert all(h is None for h in holders(settings, group.state_dir).values())
    done = rebuild(settings, group.state_dir, "--all")
    assert done.returncode == 0 and done.stdout.count("rebuilt up to offset") == 3, done
