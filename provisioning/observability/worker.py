"""A Celery worker serves its own metrics on ``KARPWEB_METRICS_PORT`` (unset: it serves none).

The tasks run in the pool's forked processes; they count in files under
``PROMETHEUS_MULTIPROC_DIR`` and the worker's main process serves the sum of them. So a worker
that serves metrics needs that directory set in its environment (an empty directory of its
own: an emptyDir in Kubernetes; ``make run`` makes one): prometheus_client reads the variable
when it is first imported, which is while Celery loads Django, before any hook of ours could
set it. The port is plain HTTP without the /metrics token: keep it inside the cluster.
Counters of a pool process that was replaced stay in the sum, as counters must.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import signals

log = logging.getLogger(__name__)

PORT = "KARPWEB_METRICS_PORT"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


@signals.worker_ready.connect
def _serve(**kwargs: Any) -> None:
    raw = os.environ.get(PORT, "").strip()
    if not raw:
        return
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{PORT}={raw!r}: expected a port number")
    if not os.environ.get(MULTIPROC_DIR):
        log.error(
            "%s is set but %s is not: the tasks count in the pool's processes, which share their counts "
            "only through files in that directory; set it to an empty directory. Not serving metrics.",
            PORT,
            MULTIPROC_DIR,
        )
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    start_http_server(int(raw), addr=os.environ.get("KARPWEB_METRICS_ADDR", "0.0.0.0"), registry=registry)
    log.info("metrics on :%s/metrics", raw, extra={"port": int(raw)})
