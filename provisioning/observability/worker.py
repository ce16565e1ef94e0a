"""A Celery worker serves its own metrics on ``KARPWEB_METRICS_PORT`` (unset: it serves none).

The tasks run in the pool's forked processes; they count in files under
``PROMETHEUS_MULTIPROC_DIR`` and the worker's main process serves the sum of them (``port.py``,
which the webhook role's gunicorn master uses too). So a worker that serves metrics needs that
directory set in its environment (an empty directory of its own: an emptyDir in Kubernetes;
``make run`` makes one): prometheus_client reads the variable when it is first imported, which
is while Celery loads Django, before any hook of ours could set it. The port is plain HTTP
without the /metrics token: keep it inside the cluster. Counters of a pool process that was
replaced stay in the sum, as counters must.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from provisioning.observability import port


@signals.worker_ready.connect
def _serve(**kwargs: Any) -> None:
    port.serve()
