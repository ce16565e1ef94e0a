"""Metrics on a port of their own: ``KARPWEB_METRICS_PORT`` (unset: none), plain HTTP.

The processes of a pod count in files under ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode) and one of them serves the sum from a thread of its own: a Celery worker's
main process serves what its pool counted (``worker.py``), the webhook role's gunicorn master
what its workers counted (``deploy/gunicorn.conf.py``, ``when_ready``). Neither of those
processes runs a request or a task itself, so what they serve is the pod's whole count.

No token and no Host check: keep the port inside the cluster (the manifests' NetworkPolicy
``karpweb-metrics`` lets in Prometheus' namespace only, and no Service exposes the port).
Nothing of Django or Celery is imported here: the gunicorn master has neither set up.
"""

from __future__ import annotations

import logging
import os
from typing import Any

PORT = "KARPWEB_METRICS_PORT"
ADDR = "KARPWEB_METRICS_ADDR"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

_log = logging.getLogger(__name__)


def serve(log: Any = None) -> int | None:
    """Serve ``/metrics`` of every process counting in ``PROMETHEUS_MULTIPROC_DIR`` on
    ``KARPWEB_METRICS_ADDR:KARPWEB_METRICS_PORT`` from a daemon thread of this process.

    Returns the port, or None when no port is set or (logged as an error) no directory is.
    A port that is no port number raises ValueError; one that cannot be bound, OSError.
    ``log`` is where to say so (gunicorn's logger in its master), this module's by default.
    """
    log = log or _log
    raw = os.environ.get(PORT, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{PORT}={raw!r}: expected a port number")
    if not os.environ.get(MULTIPROC_DIR):
        log.error(
            "%s is set but %s is not: the counts are kept in other processes, which share them "
            "only through files in that directory; set it to an empty directory. Not serving metrics.",
            PORT,
            MULTIPROC_DIR,
        )
        return None
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    port, addr = int(raw), os.environ.get(ADDR, "0.0.0.0")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise OSError(f"cannot serve metrics on {addr}:{port} ({PORT}): {exc}") from exc
    log.info("metrics on :%s/metrics", port, extra={"port": port})
    return port
