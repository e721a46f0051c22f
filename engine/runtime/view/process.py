"""The view as a process: ``epochq view run`` itself, or a child an engine or a console starts beside it.

Only one process folds a view directory: the one holding ``<state_dir>/<ns>/view.lock``
(``projections.lock``; the kernel drops it when its holder dies, ``kill -9`` included). An engine
or a console that finds it held starts no second view and says so in one INFO line.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from engine.config import Settings
from engine.errors import StoreLockedError
from engine.runtime.view.follow import ViewFollower, view_holder
from projections.lock import StoreLock
from projections.store import view_root

log = logging.getLogger("epochq.view")

STOP_WAIT_S = 15.0
RETRY_S = 2.0
"""How often a keeper looks whether its view process still runs, or whether the one that held the lock let go."""
DEFAULT_KEEP_FINISHED_S = 30 * 86_400.0


def run_view(settings: Settings, keep_finished_s: float, parent_pid: int | None = None) -> None:
    """Fold every events partition into the view of ``settings.state_dir`` until SIGTERM or SIGINT.

    StoreLockedError when another process folds that view already."""
    lock = StoreLock.acquire(view_root(settings.state_dir, settings.namespace), view_holder())
    try:
        follower = ViewFollower(settings, lock, round(keep_finished_s * 1e6))
    except BaseException:
        lock.release()
        raise
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: follower.stop())
    follower.run(parent_pid)


@dataclass
class ViewChild:
    """A view process started by this one (an engine's or a console's)."""

    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        """SIGTERM, then wait for it to commit and exit (killed after STOP_WAIT_S)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("view process %d did not stop in %.0f s; killing it", self.proc.pid, STOP_WAIT_S)
                self.proc.kill()
                self.proc.wait()


def start_view(settings: Settings, keep_finished_s: float, log_level: str = "INFO",
               say_held: bool = True) -> ViewChild | None:
    """A view of ``settings.state_dir`` in a child process; None (one INFO line) when one folds it already."""
    root = view_root(settings.state_dir, settings.namespace)
    try:
        StoreLock.acquire(root, view_holder()).release()
    except StoreLockedError as e:
        if say_held:
            log.info("view: %s is folded by %s already; not starting another", root, e.holder)
        return None
    argv = [sys.executable, "-m", "engine.cli.main", "view", "run", "--namespace", settings.namespace,
            "--state-dir", str(settings.state_dir), "--keep-finished", f"{keep_finished_s}s",
            "--log-level", log_level, "--parent-pid", str(os.getpid())]
    if settings.bootstrap:
        argv += ["--bootstrap", settings.bootstrap]
    child = ViewChild(subprocess.Popen(argv))
    log.info("view: process %d folds every partition into %s", child.proc.pid, root)
    return child


class ViewKeeper:
    """Keeps a view of a state directory running beside this process: starts one, starts it again when it dies,
    and starts one when the process that held the view's lock lets go of it (a stopped or killed engine)."""

    def __init__(self, settings: Settings, keep_finished_s: float, log_level: str = "INFO"):
        self.settings, self.keep_finished_s, self.log_level = settings, keep_finished_s, log_level
        self.child: ViewChild | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="epochq-view-keeper", daemon=True)

    def start(self) -> None:
        """Start the view now (or say who folds it already), then watch it from a thread."""
        self.child = start_view(self.settings, self.keep_finished_s, self.log_level)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, then stop the view process this keeper started, if any."""
        self._stopping.set()
        self._thread.join()
        if self.child is not None:
            self.child.stop()

    def _keep(self) -> None:
        while not self._stopping.wait(RETRY_S):
            child = self.child
            if child is not None and child.proc.poll() is not None:
                if child.proc.returncode:
                    log.warning("view: process %d exited with status %d; starting it again", child.proc.pid,
                                child.proc.returncode)
                self.child = child = None
            if child is None and not self._stopping.is_set():
                self.child = start_view(self.settings, self.keep_finished_s, self.log_level, say_held=False)
