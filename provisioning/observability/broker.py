"""The Celery broker's queues, read from Redis when Prometheus scrapes: how many tasks wait.

Celery's Redis transport (kombu) keeps each queue as a Redis list named after the queue, and a
task sent with a priority in a list beside it (``celery\\x06\\x163`` for priorities 3 to 5 …).
karpweb sends every task to the default queue, ``celery``, without a priority; the queues of
``task_queues`` and ``task_routes`` and the priority lists are counted all the same, so a
route added later shows up without a change here.

One round trip (a pipeline of LLENs) from the web replica that reports the cluster's state
(``views.py``), so each queue has one series whatever the number of replicas. When Redis cannot
be read the series are left out rather than reported as 0, which an autoscaler would take for
an empty queue; ``/metrics`` answers all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

QUEUE_LENGTH = "karpweb_celery_queue_length"


class BrokerQueues(Collector):
    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            QUEUE_LENGTH,
            "Tasks waiting in the Celery broker's queue, not yet taken by a worker (LLEN of the queue's Redis "
            "lists, priority lists included). Absent when Redis cannot be read.",
            labels=["queue"],
        )
        for queue, length in queue_lengths().items():
            family.add_metric([queue], length)
        yield family


def queue_lengths() -> dict[str, int]:
    """Queue name → tasks waiting in it; empty when there is no Redis or it cannot be read."""
    if not settings.REDIS_URL:
        return {}
    from karpweb.celery import app
    from provisioning.services.connections import get_redis

    options = app.conf.broker_transport_options or {}
    plan = {queue: redis_lists(queue, options) for queue in queue_names(app.conf)}
    try:
        pipe = get_redis().pipeline(transaction=False)
        for lists in plan.values():
            for key in lists:
                pipe.llen(key)
        lengths = iter(pipe.execute())
    except Exception as exc:  # Redis down or unreachable: the rest of /metrics still answers
        log.warning("metrics: cannot read the Celery queues' lengths (%s)", exc)
        return {}
    return {queue: sum(next(lengths) for _ in lists) for queue, lists in plan.items()}


def queue_names(conf: Any) -> list[str]:
    """The default queue, the declared ones and those ``task_routes`` (a mapping) sends to."""
    names = {conf.task_default_queue}
    names.update(queue.name for queue in conf.task_queues or ())
    routes = conf.task_routes
    if isinstance(routes, Mapping):
        for route in routes.values():
            queue = route.get("queue") if isinstance(route, Mapping) else route
            name = getattr(queue, "name", queue)
            if isinstance(name, str) and name:
                names.add(name)
    return sorted(names)


def redis_lists(queue: str, options: Mapping[str, Any]) -> list[str]:
    """The Redis lists kombu keeps a queue's messages in: the queue's own name (priority 0) and
    one per other priority step, under the transport's ``global_keyprefix`` if one is set."""
    from kombu.transport.redis import Channel

    sep = options.get("sep", Channel.sep)
    steps = options.get("priority_steps", Channel.priority_steps)
    prefix = options.get("global_keyprefix", "") or ""
    names = [queue, *(f"{queue}{sep}{step}" for step in steps if step)]
    return [prefix + name for name in dict.fromkeys(names)]
