"""NodeClaims of identical launch input launched together: one CreateFleet for a batch.

Upstream (reference Part II §5.1 item 8) merges concurrent CreateFleet calls whose input is
identical (idle window 35 ms, at most 1 s, at most 1,000 calls): one fleet whose
TotalTargetCapacity is the number of callers, an instance handed to each, the fleet's errors
to those left without. There are two ways to have that here:

(a) at the source: a provisioning run (or a disruption's replacements) creates every claim
    of a burst at once, so it knows which ones would make identical calls: those with equal
    :func:`~provisioning.services.cloud.launch_input` (NodePool, EC2NodeClass, offerings,
    taints, startup taints). They form a batch, launched by one task with one fleet;
(b) a batcher across worker tasks: each launch task would publish its input in Redis under
    its hash and wait out the window, and one of them would call for all and hand out ids.

This module does (a): it is the simpler, and it merges what (b) would. The calls (b) merges
come from claims one run created together, and (a) groups them without waiting; in (b) every
launch, single ones too, would wait for the window, workers would block on each other, and
a worker dying as the caller would hold the others' answers. Here the batch is a column of
its claims (``launch_batch``), so a redelivered task, a retry and ``relaunch_stuck`` all meet
the same batch with the same ClientToken. Claims of different runs are never merged; upstream
merges only calls made within 35 ms of each other, which runs a second apart do not make.

How a batch launches (:func:`launch_batch`):

* its token (``fleet-`` and a hash of the sorted uids of its claims) is the fleet's
  ClientToken and a tag of its instances, so a retry finds what an earlier attempt
  launched and pairs it as that attempt did (``AWSCloud.launch_batch``);
* its claims move PENDING → LAUNCHING one by one by conditional updates, and only those it
  moved are launched: two workers never launch one claim;
* one instant fleet of the capacity type upstream would pick (spot while a spot offering
  is left) over the offerings not marked unavailable; each instance is then tagged with its
  claim's name;
* throttling is retried with backoff, then the task is (its claims back to PENDING);
* what the fleet did not fill, and any other failure, goes to the per-claim launch
  (:func:`~provisioning.services.cloud.launch_nodeclaim`) once the fleet's
  insufficient-capacity errors are in the ICE cache: it falls back over the remaining
  offerings and to on-demand, or writes the reason on the claim, as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from provisioning.cloud.base import (
    BatchLaunch,
    CloudError,
    CloudProvider,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    Throttled,
)
from provisioning.cloud.launch import launch_batch_with_backoff
from provisioning.models import NodeClaim
from provisioning.services.cloud import get_cloud, ice_cache, launch_input, launch_request, record_launched
from provisioning.services.connections import get_redis
from provisioning.services.dispatch import dispatcher

log = logging.getLogger(__name__)

MAX_BATCH = 1000  # upstream's largest batch


def batch_token(uids: Iterable[str]) -> str:
    """The batch's token (the fleet's ClientToken: at most 64 characters), from its claims."""
    return "fleet-" + hashlib.sha256("\n".join(sorted(uids)).encode()).hexdigest()[:58]


def plan_launches(claims: Sequence[NodeClaim]) -> list[list[NodeClaim]]:
    """The claims, not saved yet, grouped as they will launch, those with the most pods
    first: claims of identical launch input together (up to 1,000; each gets its batch's
    token in ``launch_batch``), the others alone. RunInstances launches one instance type
    in one subnet, so with it every claim launches alone."""
    if settings.KARPWEB_LAUNCH_API != "fleet":
        return [[claim] for claim in claims]
    groups: dict[str, list[NodeClaim]] = {}
    for claim in claims:
        if any(o.get("capacityReservationId") for o in claim.launch_options):
            # A launch into a capacity reservation is a RunInstances that targets it: alone.
            groups.setdefault(f"reserved:{claim.uid}", []).append(claim)
            continue
        groups.setdefault(launch_input(claim), []).append(claim)
    launches = [group[i : i + MAX_BATCH] for group in groups.values() for i in range(0, len(group), MAX_BATCH)]
    for batch in launches:
        if len(batch) > 1:
            token = batch_token(str(claim.uid) for claim in batch)
            for claim in batch:
                claim.launch_batch = token
    # Workers take launches in this order, fewer at a time than there are: the launches that
    # unblock the most pending pods go first.
    return sorted(launches, key=lambda launch: sum(len(claim.pods) for claim in launch), reverse=True)


def dispatch(launches: Iterable[list[NodeClaim]]) -> None:
    """One task per launch: a batch's, or a claim's."""
    jobs = dispatcher()
    for launch in launches:
        if launch[0].launch_batch:
            jobs.launch_batch(launch[0].launch_batch)
        else:
            jobs.launch_claim(launch[0].pk)


def launch_batch(token: str, cloud: CloudProvider | None = None) -> list[NodeClaim]:
    """Launch the pending claims of batch ``token`` with one fleet; returns the claims this
    call took (none when other workers have them all).

    Throttling propagates once the backoff is spent (the task retries it); the claims the
    fleet did not fill are handed to the per-claim launch.
    """
    started = timezone.now()
    pending = NodeClaim.objects.filter(launch_batch=token, state=NodeClaim.State.PENDING).order_by("name")
    claims = [
        c for c in pending if c.move(NodeClaim.State.PENDING, NodeClaim.State.LAUNCHING, launch_started_at=started)
    ]
    if not claims:
        return []
    NodeClaim.objects.filter(pk__in=[c.pk for c in claims]).update(launch_attempts=F("launch_attempts") + 1)
    cloud = cloud or get_cloud()
    mark_unavailable, is_unavailable = ice_cache(get_redis())
    try:
        request = _batch_request(claims, token, cloud, is_unavailable)
        result = launch_batch_with_backoff(cloud, request, tuple(c.name for c in claims))
    except Throttled:
        for claim in claims:
            claim.move(NodeClaim.State.LAUNCHING, NodeClaim.State.PENDING)
        raise
    except CloudError as exc:
        result = BatchLaunch({}, exc)
    for claim in claims:
        if claim.name in result.instances:
            record_launched(claim, result.instances[claim.name])
    left = [c for c in claims if c.name not in result.instances]
    if left:
        _hand_over(token, left, result.shortfall, mark_unavailable)
    log.info("batch %s: %d of %d claims launched by one fleet", token, len(claims) - len(left), len(claims))
    return claims


def _batch_request(
    claims: list[NodeClaim], token: str, cloud: CloudProvider, is_unavailable: Callable[[LaunchOption], bool]
) -> LaunchRequest:
    """The launch request every claim of the batch would make, named after the batch, over the
    offerings not marked unavailable; a first attempt when no claim was tried before (their
    attempts as read, before this one was counted)."""
    request = launch_request(claims[0], cloud)
    options = tuple(o for o in request.options if not is_unavailable(o))
    return dataclasses.replace(
        request,
        nodeclaim_name=token,
        nodeclaim_uid=token,
        options=options,
        capacity_type="spot" if any(o.capacity_type == "spot" for o in options) else "on-demand",
        first_attempt=all(c.launch_attempts == 0 for c in claims),
    )


def _hand_over(
    token: str,
    claims: list[NodeClaim],
    shortfall: CloudError | None,
    mark_unavailable: Callable[[LaunchOption], None],
) -> None:
    """Claims the fleet left without an instance leave the batch and launch one by one, once
    the offerings the fleet found exhausted are marked, so they are not tried again."""
    if isinstance(shortfall, InsufficientCapacity):
        for option in shortfall.unavailable:
            mark_unavailable(option)
    log.info("batch %s: %d claims launch one by one: %s", token, len(claims), shortfall)
    for claim in claims:
        if claim.move(NodeClaim.State.LAUNCHING, NodeClaim.State.PENDING, launch_batch=""):
            dispatcher().launch_claim(claim.pk)
