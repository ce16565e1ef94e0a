"""A Celery worker serves its own metrics on ``KARPWEB_METRICS_PORT`` (unset: it serves none).

The tasks run in the pool's forked processes; they count in files under
``PROMETHEUS_MULTIPROC_DIR`` and the worker's main process serves the sum of them.
prometheus_client reads that variable once, when it is first imported, so
``share_between_processes`` runs from ``karpweb/celery.py`` before anything imports it: the
worker's Deployment may set the directory (an emptyDir), else a fresh one is made and removed
at shutdown. The port is plain HTTP without the /metrics token: keep it inside the cluster.
Counters of a pool process that was replaced stay in the sum, as counters must.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from celery import signals

log = logging.getLogger(__name__)

PORT = "KARPWEB_METRICS_PORT"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
_made: list[str] = []


def share_between_processes() -> None:
    """Give this process and its forks a shared metrics directory, when it serves metrics."""
    if not os.environ.get(PORT) or os.environ.get(MULTIPROC_DIR):
        return
    shm = "/dev/shm"  # memory: the counters' files are written on every increment
    directory = tempfile.mkdtemp(prefix="karpweb-metrics-", dir=shm if os.access(shm, os.W_OK) else None)
    os.environ[MULTIPROC_DIR] = directory
    _made.append(directory)


@signals.worker_ready.connect
def _serve(**kwargs: Any) -> None:
    raw = os.environ.get(PORT, "").strip()
    if not raw:
        return
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{PORT}={raw!r}: expected a port number")
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server

    registry = REGISTRY
    if os.environ.get(MULTIPROC_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    start_http_server(int(raw), addr=os.environ.get("KARPWEB_METRICS_ADDR", "0.0.0.0"), registry=registry)
    log.info("metrics on :%s/metrics", raw, extra={"port": int(raw)})


@signals.worker_shutdown.connect
def _clean_up(**kwargs: Any) -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
