"""The cluster as the disruption planners see it, read from Kubernetes documents.

The disruption round reads its rows as documents (``provision.cluster_documents``) and
``manage.py simulate --disruption`` reads the user's files; both come here, so the what-if
answers with the controller's own picture: the same reader (THE validator, the catalog), the
same candidates (``disruption.nodes``), the same PodDisruptionBudget arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from provisioning.disruption import drift
from provisioning.disruption.eviction import Limits, budget_from_manifest
from provisioning.disruption.model import Candidate, PoolPolicy
from provisioning.disruption.nodes import Claim, candidate, parse_time
from provisioning.disruption.text import plural
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.workloads import ExistingNode
from provisioning.services.simulate import SimulateError, read_cluster

NODEPOOL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"

ClaimOf = Callable[[ExistingNode, Snapshot], "Claim | str"]


@dataclass(frozen=True)
class Picture:
    """``candidates``: Karpenter's nodes; ``left_out``: every other node, with why;
    ``snapshot``: the cluster for the solver (pending pods included)."""

    candidates: list[Candidate]
    policies: dict[str, PoolPolicy]
    snapshot: Snapshot
    notes: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    pods: int = 0


def read_picture(
    documents: Iterable[Any],
    *,
    now: datetime,
    claim_of: ClaimOf,
    last_pod_change: Callable[[str], float | None] = lambda name: None,
    **read_options: Any,
) -> Picture:
    """Candidates, policies and the solver's snapshot for ``documents``.

    ``claim_of(node)`` says what the node's NodeClaim records, or why the node is not a
    candidate. Raises :class:`SimulateError` on invalid input, naming document and field."""
    snapshot, notes, workloads = read_cluster(documents, now=now, **read_options)
    policies: dict[str, PoolPolicy] = {}
    for document in workloads.policies:
        if document.get("kind") != "NodePool":
            continue
        name = (document.get("metadata") or {}).get("name") or ""
        try:
            policies[name] = PoolPolicy.from_spec(name, document.get("spec") or {})
        except ValueError as exc:
            raise SimulateError(f"NodePool {name}: {exc}") from None
    every_pod = [pod for node in workloads.nodes for pod in node.pods]
    limits = Limits(budget_from_manifest(b, every_pod) for b in workloads.budgets)
    annotations = {pool.name: pool.annotations for pool in snapshot.nodepools}
    moment = now.timestamp()
    candidates, left_out = [], {}
    for node in workloads.nodes:
        if not node.managed:
            left_out[node.name] = f"not Karpenter's: the node has no {NODEPOOL} label"
            continue
        claim = claim_of(node, snapshot)
        if isinstance(claim, str):
            left_out[node.name] = claim
            continue
        candidates.append(
            candidate(
                node,
                claim,
                pool_annotations=annotations.get(claim.nodepool, {}),
                limits=limits,
                now=moment,
                last_pod_change_at=last_pod_change(node.name),
            )
        )
    return Picture(candidates, policies, snapshot, notes, left_out, len(workloads.pods))


# ------------------------------------------------------------------ the what-if's nodes


def claims_from_labels(catalog: Any, now: datetime) -> ClaimOf:
    """For documents: a Node's NodeClaim is read from the labels Karpenter sets on it.

    Its price is its offering's in the catalog, its age counts from ``creationTimestamp``; it
    has drifted when its labels no longer meet its NodePool's requirements or the NodePool no
    longer offers its type (static drift needs the hash karpweb stamps, when present)."""

    def claim_of(node: ExistingNode, snapshot: Snapshot) -> Claim | str:
        labels = node.labels
        pool_name = labels[NODEPOOL]
        pools = {pool.name: pool for pool in snapshot.nodepools}
        missing = [key for key in (INSTANCE_TYPE, ZONE, CAPACITY_TYPE) if not labels.get(key)]
        if missing:
            return f"Node {node.name}: metadata.labels: {', '.join(missing)} missing, so its price is unknown"
        type_name, zone, capacity_type = labels[INSTANCE_TYPE], labels[ZONE], labels[CAPACITY_TYPE]
        it = catalog.instance_type(type_name)
        offering = next(
            (o for o in (it.offerings if it else ()) if o.zone == zone and o.capacity_type == capacity_type), None
        )
        if offering is None or offering.price is None:
            return f"{type_name} {capacity_type} in {zone} has no price in the catalog"
        created = parse_time(node.creation_timestamp)
        pool = pools.get(pool_name)
        reason = None
        if pool is not None:
            template = {
                "metadata": {"annotations": dict(pool.annotations)},
                "spec": {"requirements": pool.requirements.to_list()},
            }
            recorded = {
                "version": node.annotations.get("karpenter.sh/nodepool-hash-version", ""),
                "nodepool": node.annotations.get("karpenter.sh/nodepool-hash", ""),
            }
            types = {t.name: t for t in pool.instance_types}
            own = types.get(type_name)
            reason = drift.drift_reason(
                labels={**(own.labels if own else {}), **labels},
                recorded=recorded,
                template=template,
                nodeclass_spec=None,
                offered_types=set(types),
                offered=drift.offerings_of(types),
                age_seconds=None if created is None else now.timestamp() - created,
            )
        initialized = node.initialized or ("karpenter.sh/initialized" not in labels and node.ready)
        return Claim(
            name=node.name,
            nodepool=pool_name,
            instance_type=type_name,
            capacity_type=capacity_type,
            zone=zone,
            price_per_hour=offering.price,
            created_at=created if created is not None else now.timestamp(),
            initialized=initialized,
            drift_reason=None if reason is None else drift.explain(reason, pool_name, pool.nodeclass if pool else ""),
        )

    return claim_of


def last_change_from_pods(documents: Iterable[Any]) -> Mapping[str, float]:
    """When each node's pods last changed, as far as documents tell: the newest of its pods'
    ``creationTimestamp`` (a document cannot say when a pod left)."""
    newest: dict[str, float] = {}
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != "Pod":
            continue
        node = (document.get("spec") or {}).get("nodeName")
        created = parse_time((document.get("metadata") or {}).get("creationTimestamp"))
        if node and created is not None:
            newest[node] = max(newest.get(node, created), created)
    return newest


# ------------------------------------------------------------------ the what-if


def what_if(
    documents: list[Any], *, now: datetime, region: str = "us-east-1", spot_to_spot: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """``simulate --disruption``: the disruption planner once over the cluster the documents
    describe, changing nothing; and notes for people. Raises :class:`SimulateError` on
    invalid input."""
    import time

    from django.conf import settings

    from provisioning.disruption import planner
    from provisioning.services.catalog import bundled_catalog

    started = time.perf_counter()
    catalog = bundled_catalog(region)
    changes = last_change_from_pods(documents)

    def last_change(name: str) -> float | None:
        return changes.get(name)

    claim_of = claims_from_labels(catalog, now)
    picture = read_picture(documents, now=now, claim_of=claim_of, last_pod_change=last_change, catalog=catalog)
    # consolidateAfter counts from the later of the node's creation and its newest pod's.
    candidates = [
        replace(c, last_pod_change_at=max(c.created_at, changes.get(c.name, c.created_at))) for c in picture.candidates
    ]
    result = planner.plan(
        candidates,
        picture.policies,
        picture.snapshot,
        now.timestamp(),
        spot_to_spot=spot_to_spot,
        repacking=settings.KARPWEB_REPACKING,
    )
    return answer(picture, candidates, result, time.perf_counter() - started), picture.notes


def answer(picture: Picture, candidates: list[Candidate], result: Any, seconds: float) -> dict[str, Any]:
    """The what-if's JSON: the commands, every node with why it is or is not chosen, stats."""
    chosen = {name: command for command in result.commands for name in command.candidates}
    nodes = []
    for c in candidates:
        if c.name in chosen:
            nodes.append({"name": c.name, "candidate": True, "reason": chosen[c.name].explanation})
        else:
            nodes.append({"name": c.name, "candidate": False, "reason": result.not_candidates.get(c.name, "")})
    nodes += [{"name": name, "candidate": False, "reason": why} for name, why in picture.left_out.items()]
    statics = [
        {
            "nodePool": s.pool.name,
            "replicas": s.replicas,
            "nodes": sum(1 for c in candidates if c.nodepool == s.pool.name),
        }
        for s in picture.snapshot.static_nodepools
    ]
    return {
        "commands": [
            {
                "reason": command.reason,
                "candidates": list(command.candidates),
                "replacements": [
                    {
                        "nodePool": claim.nodepool,
                        "instanceType": claim.chosen.instance_type,
                        "capacityType": claim.chosen.capacity_type,
                        "zone": claim.chosen.zone,
                        "pricePerHour": round(claim.chosen.price, 6),
                        "pods": sorted(claim.pods),
                    }
                    for claim in command.replacements
                ],
                "savingsPerHour": command.savings_per_hour,
            }
            for command in result.commands
        ],
        "nodes": sorted(nodes, key=lambda n: n["name"]),
        **({"staticNodePools": statics} if statics else {}),  # only when there are: the shape is otherwise as it was
        "stats": {"nodes": len(nodes), "pods": picture.pods, "seconds": round(seconds, 3)},
    }


def what_if_table(result: Mapping[str, Any]) -> str:
    """The what-if for people: each command, then each node and why."""
    lines = []
    for command in result["commands"]:
        lines.append(
            f"{command['reason']}: {', '.join(command['candidates'])} (saves ${command['savingsPerHour']:.4f}/h)"
        )
        for r in command["replacements"]:
            lines.append(
                f"  + {r['instanceType']} {r['capacityType']} {r['zone']} ${r['pricePerHour']:.4f}/h "
                f"({len(r['pods'])} pods, NodePool {r['nodePool']})"
            )
    if not result["commands"]:
        lines.append("no disruption now")
    for static in result.get("staticNodePools", ()):
        lines.append(
            f"static NodePool {static['nodePool']}: {static['nodes']} of {static['replicas']} replicas; never "
            f"consolidated, drifted nodes replaced one for one"
        )
    lines.append("")
    for node in result["nodes"]:
        mark = "*" if node["candidate"] else "-"
        lines.append(f"{mark} {node['name']}: {node['reason']}")
    stats = result["stats"]
    counted = f"{plural(stats['nodes'], 'node')}, {plural(stats['pods'], 'pod')}"
    lines.append(f"\n{counted}, planned in {stats['seconds']:.3f} s")
    return "\n".join(lines) + "\n"
