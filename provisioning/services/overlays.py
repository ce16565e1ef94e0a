"""NodeOverlays' status: whether each is applied or left out for a conflict, and where it
reaches, as upstream's NodeOverlay controller reports it (conditions ``ValidationSucceeded``
and ``Ready``).

What an overlay does is decided where every plan decides it (``simulate.overlaid``, over
``scheduling.overlays``); this module only writes the verdict on the rows: after a NodeOverlay
is written, and every minute (a NodePool's labels or the catalog can change the answer).
Written only when it changed, without a new resourceVersion (status is observed state, as for
EC2NodeClasses), so nobody's edit turns into a conflict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioning.crd.labels import CAPACITY_TYPE, NODEPOOL, ZONE
from provisioning.models import NodeOverlay
from provisioning.scheduling.overlays import Applied
from provisioning.scheduling.requirements import INSTANCE_TYPE_LABELS, OFFERING_LABELS
from provisioning.scheduling.snapshot import NodePoolInput

log = logging.getLogger(__name__)

VALIDATION_SUCCEEDED = "ValidationSucceeded"
READY = "Ready"
CONFLICT = "Conflict"


@dataclass(frozen=True)
class Verdict:
    """One overlay as the catalog applies it now."""

    conflict: str  # why it is left out ("" when applied)
    reach: dict[str, int]  # NodePool → instance types it changes there, of those the NodePool allows

    @property
    def applied(self) -> bool:
        return not self.conflict

    def describe(self) -> str:
        """What follows "It": ``changes 12 instance types NodePool general allows``, or the conflict."""
        if self.conflict:
            return f"is not applied: it {self.conflict}"
        if not self.reach:
            return "changes no instance type a NodePool allows"
        if len(self.reach) == 1:
            ((pool, count),) = self.reach.items()
            return f"changes {count} instance types NodePool {pool} allows"
        pools = ", ".join(f"{n} of NodePool {pool}" for pool, n in sorted(self.reach.items()))
        return f"changes {sum(self.reach.values())} instance types the NodePools allow ({pools})"


def evaluate() -> dict[str, Verdict]:
    """Every stored NodeOverlay's verdict against the policies and catalog in force (empty when
    the policies cannot be read: the provisioning run says why)."""
    from provisioning.services.catalog import load_catalog
    from provisioning.services.provision import policy_documents
    from provisioning.services.simulate import SimulateError, overlay_report

    names = list(NodeOverlay.objects.values_list("name", flat=True))
    if not names:
        return {}
    try:
        pools, applied = overlay_report(policy_documents(), catalog=load_catalog())
    except SimulateError as exc:
        log.warning("NodeOverlay status: the policies do not read: %s", exc)
        return {}
    reach = _launchable_reach(pools, applied)
    return {name: Verdict(applied.conflicts.get(name, ""), reach.get(name, {})) for name in names}


def _launchable_reach(pools: list[NodePoolInput], applied: Applied) -> dict[str, dict[str, int]]:
    """Overlay → NodePool → how many instance types it changes that the NodePool's requirements
    allow (an overlay is laid over every type of the EC2NodeClass, as upstream's; a person asks
    what it changes of what the NodePool launches)."""
    out: dict[str, dict[str, int]] = {}
    for pool in pools:
        zone, capacity_type = pool.requirements.get(ZONE), pool.requirements.get(CAPACITY_TYPE)
        on_types = pool.requirements.without(*OFFERING_LABELS, NODEPOOL)
        for it in applied.instance_types.get(pool.name, ()):
            offerings = [
                o
                for o in it.offerings
                if (zone is None or zone.has(o.zone)) and (capacity_type is None or capacity_type.has(o.capacity_type))
            ]
            names = set(it.overlays) if offerings else set()
            names.update(n for o in offerings for n in o.overlays)
            keys = INSTANCE_TYPE_LABELS | set(it.labels)
            if not names or not on_types.only(keys).matches(it.labels):
                continue
            for name in names:
                per_pool = out.setdefault(name, {})
                per_pool[pool.name] = per_pool.get(pool.name, 0) + 1
    return out


def refresh_status() -> dict[str, bool]:
    """Write each NodeOverlay's conditions where they changed; name → applied."""
    verdicts = evaluate()
    for overlay in NodeOverlay.objects.filter(name__in=list(verdicts)):
        status = status_of(overlay, verdicts[overlay.name])
        if status != overlay.status:
            # Conditional on the generation judged: an edit meanwhile is judged by its own refresh.
            NodeOverlay.objects.filter(pk=overlay.pk, generation=overlay.generation).update(status=status)
    return {name: verdict.applied for name, verdict in verdicts.items()}


def status_of(overlay: NodeOverlay, verdict: Verdict, now: datetime | None = None) -> dict[str, Any]:
    """The overlay's status with ``ValidationSucceeded`` and ``Ready`` for the verdict; other
    keys (the cluster sync's note) are kept, and a condition keeps its lastTransitionTime while
    its status holds."""
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = {c.get("type"): c for c in (overlay.status or {}).get("conditions") or [] if isinstance(c, dict)}

    def condition(kind: str) -> dict[str, Any]:
        value = "True" if verdict.applied else "False"
        kept = before.get(kind, {})
        return {
            "type": kind,
            "status": value,
            "reason": kind if verdict.applied else CONFLICT,
            "message": "" if verdict.applied else f"not applied: it {verdict.conflict}",
            "lastTransitionTime": kept.get("lastTransitionTime") if kept.get("status") == value else moment,
            "observedGeneration": overlay.generation,
        }

    conditions = [condition(VALIDATION_SUCCEEDED), condition(READY)]
    if [dict(c, lastTransitionTime=None) for c in conditions] == [
        dict(before.get(c["type"], {}), lastTransitionTime=None) for c in conditions
    ]:
        return overlay.status
    return {**(overlay.status or {}), "conditions": conditions}
