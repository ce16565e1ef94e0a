"""``GET /metrics`` of the web role: this server's own metrics, and the cluster's state from one
web replica. (The webhook role serves no /metrics on the port the API server calls: its gunicorn
master serves its workers' metrics on ``KARPWEB_METRICS_PORT``, ``port.py``.)

A URL like any other of the web role, so it passes the Host check first:
Prometheus scrapes a pod by its IP address, which the manifests add to ALLOWED_HOSTS (POD_IP).
With ``KARPWEB_METRICS_TOKEN`` set it wants ``Authorization: Bearer <token>`` (Prometheus'
``authorization`` or ``bearer_token_file``); without one it is open on a checkout and answers
403 in production (``KARPWEB_PRODUCTION``), where the pods, their owners and the spend are
nobody's business but Prometheus'. Nothing here needs a session or a CSRF token.

The cluster's state (``cluster.py``) and the length of the Celery queues (``broker.py``) come
from the web replica holding a lease in Redis:
the first to be scraped takes it, each scrape by its holder renews it, and when the holder
is gone another takes it ``KARPWEB_METRICS_LEASE_SECONDS`` later (set it above the scrape
interval). A replica is its gunicorn server: the host name and the master's pid, so all
workers of one pod answer alike. ``karpweb_metrics_cluster_state_exporter`` says which
replica it is.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import socket

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from provisioning.observability.broker import BrokerQueues
from provisioning.observability.cluster import ClusterState

log = logging.getLogger(__name__)

LEASE_KEY = "karpweb:metrics:cluster-state"
# Take the lease when it is free or ours, in one step: two replicas never both get it.
_TAKE_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_registry()), content_type=content_type)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics, else the answer that says why not."""
    token = settings.KARPWEB_METRICS_TOKEN
    if not token:
        if not settings.KARPWEB_PRODUCTION:
            return None
        return HttpResponse(
            "metrics are closed: set KARPWEB_METRICS_TOKEN and send Authorization: Bearer <token>\n",
            status=403,
            content_type="text/plain",
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    return HttpResponse(
        "metrics need Authorization: Bearer <KARPWEB_METRICS_TOKEN>\n",
        status=401,
        content_type="text/plain",
        headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
    )


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # every worker of this server, from its files
    else:
        registry.register(_ThisProcess(REGISTRY))  # one process: its own registry holds it all
    exporting = holds_lease()
    registry.register(_Exporter(exporting))
    if exporting:
        registry.register(ClusterState())
        registry.register(BrokerQueues())
    return registry


class _ThisProcess(Collector):
    """The default registry as one collector of another (names are checked there already)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self):
        return self.registry.collect()


class _Exporter(Collector):
    def __init__(self, exporting: bool) -> None:
        self.exporting = exporting

    def collect(self):
        family = GaugeMetricFamily(
            "karpweb_metrics_cluster_state_exporter",
            "1 on the web replica that adds the cluster's state (from the database) to its /metrics, 0 on the others.",
        )
        family.add_metric([], 1 if self.exporting else 0)
        yield family


def holds_lease() -> bool:
    """True when this replica reports the cluster's state now (taking or renewing the lease)."""
    if not settings.REDIS_URL:
        return True  # no Redis, no other replica to share with
    from provisioning.services.connections import get_redis

    ttl_ms = int(max(1.0, settings.KARPWEB_METRICS_LEASE_SECONDS) * 1000)
    try:
        return bool(get_redis().eval(_TAKE_LEASE, 1, LEASE_KEY, replica(), ttl_ms))
    except Exception as exc:  # Redis unreachable: better a duplicate than a hole in every panel
        log.warning("metrics: cannot read the cluster-state lease (%s); exporting the cluster's state", exc)
        return True


@functools.cache
def replica() -> str:
    return f"{socket.gethostname()}:{os.getppid()}"
