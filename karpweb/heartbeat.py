"""Liveness for the processes that serve no HTTP: the Celery worker and beat, and cluster_watch.

Each one's main loop touches the file named by KARPWEB_HEARTBEAT_FILE (at most once a second);
the kubelet's exec probe, ``python -m karpweb.entrypoint alive``, fails when the file has grown
older than a limit. A process that still runs but no longer loops (a hung broker connection, a
stuck watch) is then restarted, which a check that the process exists would never do. Without
KARPWEB_HEARTBEAT_FILE (a checkout, ``make run``) nothing is written.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from celery.beat import PersistentScheduler

ENV = "KARPWEB_HEARTBEAT_FILE"
_last_touch = 0.0


def touch() -> None:
    global _last_touch
    path = os.environ.get(ENV)
    now = time.monotonic()
    if not path or now - _last_touch < 1.0:
        return
    _last_touch = now
    # On failure the probe finds the file stale and says so; the loop itself goes on.
    with contextlib.suppress(OSError):
        Path(path).touch()


def age(path: Path) -> float | None:
    """Seconds since the last touch, or None when there has been none."""
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


def on_worker_heartbeat(**_kwargs: object) -> None:
    """Receiver of Celery's ``heartbeat_sent``: the worker's event loop sends one every 2 s."""
    touch()


class Scheduler(PersistentScheduler):
    """The default beat scheduler, which also touches the heartbeat on every tick."""

    def tick(self, *args, **kwargs):
        touch()
        return super().tick(*args, **kwargs)
