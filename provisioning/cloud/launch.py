"""Launch policy over any CloudProvider: insufficient-capacity fallback, throttling backoff
(for one NodeClaim and for a batch), garbage collection of instances no NodeClaim owns. Pure:
no boto3, no Django, no Redis (the ICE cache is reached through the callables passed in; the
clock and sleep are injected).

Upstream (reference Part II §5.1 step 4, §5.2) has no in-call fallback: the ICE cache marks
exhausted offerings and the next scheduling round launches elsewhere. Here one launch task
does those rounds itself: it retries with the offerings left and, when a NodePool allowed
both capacity types and spot is exhausted, launches on-demand.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from provisioning.cloud.base import (
    BatchLaunch,
    CloudError,
    CloudProvider,
    Instance,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    Throttled,
)

log = logging.getLogger(__name__)

THROTTLE_ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 8.0
GC_MIN_AGE = timedelta(seconds=30)
Result = TypeVar("Result")


def backoff_delay(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^attempt)]."""
    return rng() * min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)


def launch_with_fallback(
    cloud: CloudProvider,
    request: LaunchRequest,
    mark_unavailable: Callable[[LaunchOption], None],
    is_unavailable: Callable[[LaunchOption], bool],
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    throttle_attempts: int = THROTTLE_ATTEMPTS,
) -> Instance:
    """Launch ``request``, trying its capacity type first and on-demand after it.

    * :class:`InsufficientCapacity`: each exhausted offering is marked (``mark_unavailable``,
      the 3-minute ICE cache) and the launch is retried with the offerings of that capacity
      type still available; when none are left and the request has on-demand offerings
      (the NodePool allowed both), it falls back to on-demand. When everything is exhausted
      the last :class:`InsufficientCapacity` is raised, carrying every offering exhausted.
    * :class:`Throttled`: retried with exponential backoff and jitter, ``throttle_attempts``
      calls in all, then raised.
    * Any other :class:`CloudError` is raised at once (it will not go away by retrying).
    """
    # reserved, then spot, then on-demand: from the request's capacity type on, those it has.
    order = ("reserved", "spot", "on-demand")
    start = order.index(request.capacity_type) if request.capacity_type in order else 0
    capacity_types = [request.capacity_type] + [
        ct for ct in order[start + 1 :] if any(o.capacity_type == ct for o in request.options)
    ]
    exhausted: dict[LaunchOption, None] = {}  # ordered set: also guards against a lagging cache
    last_error: InsufficientCapacity | None = None
    for capacity_type in capacity_types:
        while True:
            remaining = tuple(
                o
                for o in request.options
                if o.capacity_type == capacity_type and o not in exhausted and not is_unavailable(o)
            )
            if not remaining:
                break
            attempt = replace(request, options=remaining, capacity_type=capacity_type)
            try:
                instance = with_backoff(
                    lambda _, attempt=attempt: cloud.launch(attempt),
                    f"nodeclaim {request.nodeclaim_name}",
                    sleep=sleep,
                    rng=rng,
                    attempts=throttle_attempts,
                )
            except InsufficientCapacity as exc:
                last_error = exc
                out = [o for o in exc.unavailable if o not in exhausted]
                if not any(o in remaining for o in out):
                    # Nothing we asked for was named: count every offering tried as exhausted,
                    # otherwise the same launch would be repeated forever.
                    out += [o for o in remaining if o not in out]
                for option in out:
                    exhausted[option] = None
                    mark_unavailable(option)
                log.info(
                    "nodeclaim %s: %d %s offerings exhausted (%s); %s",
                    request.nodeclaim_name,
                    len(out),
                    capacity_type,
                    exc.reason,
                    "retrying with the rest",
                )
                continue
            if capacity_type != request.capacity_type:
                log.info(
                    "nodeclaim %s: %s exhausted, launched %s instead",
                    request.nodeclaim_name,
                    request.capacity_type,
                    capacity_type,
                )
            return instance
    tried = ", ".join(capacity_types)
    error = InsufficientCapacity(
        f"no capacity for NodeClaim {request.nodeclaim_name}: every {tried} offering is exhausted"
        + (f" (last: {last_error})" if last_error else ""),
        unavailable=tuple(exhausted),
    )
    if last_error is not None and last_error.reason != InsufficientCapacity.reason:
        error.reason = last_error.reason
    raise error


def with_backoff(
    call: Callable[[int], Result],
    what: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    attempts: int = THROTTLE_ATTEMPTS,
) -> Result:
    """``call(attempt)``, retried on :class:`Throttled` with exponential backoff and jitter,
    ``attempts`` calls in all; the last :class:`Throttled` is raised."""
    for attempt in range(attempts):
        try:
            return call(attempt)
        except Throttled:
            if attempt + 1 >= attempts:
                raise
            delay = backoff_delay(attempt, rng)
            log.info("%s: throttled, retrying in %.2fs", what, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def launch_batch_with_backoff(
    cloud: CloudProvider,
    request: LaunchRequest,
    nodeclaims: tuple[str, ...],
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    throttle_attempts: int = THROTTLE_ATTEMPTS,
) -> BatchLaunch:
    """:meth:`CloudProvider.launch_batch`, throttling retried with backoff. A retry looks for
    what the throttled attempt may have launched (it may have been throttled tagging)."""
    return with_backoff(
        lambda attempt: cloud.launch_batch(
            request if attempt == 0 else replace(request, first_attempt=False), nodeclaims
        ),
        f"batch {request.nodeclaim_name}",
        sleep=sleep,
        rng=rng,
        attempts=throttle_attempts,
    )


def garbage_collect(
    cloud: CloudProvider,
    known_instance_ids: set[str],
    now: datetime,
    min_age: timedelta = GC_MIN_AGE,
) -> list[str]:
    """Terminate this cluster's instances that no NodeClaim owns and that are older than
    ``min_age`` (reference Part II §5.7); returns the ids terminated. ``known_instance_ids``
    may hold instance ids or provider ids (``aws:///zone/i-...``)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    terminated: list[str] = []
    for instance in cloud.list_instances():
        if instance.id in known_instance_ids or instance.provider_id in known_instance_ids:
            continue
        if instance.state == "shutting-down":
            continue
        launched = instance.launch_time
        if launched is not None and launched.tzinfo is None:
            launched = launched.replace(tzinfo=UTC)
        if launched is None or now - launched <= min_age:
            continue
        try:
            cloud.terminate(instance.id)
        except CloudError as exc:
            log.warning("garbage collection could not terminate %s: %s", instance.id, exc)
            continue
        terminated.append(instance.id)
    return terminated
