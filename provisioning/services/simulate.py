"""What-if planning: Kubernetes documents in, the NodeClaims karpweb would launch out.

``manage.py simulate`` is to node provisioning what ``terraform plan`` is to infrastructure.
It reads NodePool and EC2NodeClass documents with the workloads of an application (Pod,
Deployment, ReplicaSet, StatefulSet, Job, DaemonSet), the nodes that already run (Node),
Namespaces (their labels, for namespaceSelectors) and Services (their selectors, for default
topology spreads), turns them into the solver's :class:`Snapshot`, solves, and shows the
:class:`Plan`.

* NodePools and EC2NodeClasses are checked by THE validator (``provisioning.crd.validate``);
  any error makes the input invalid (:class:`SimulateError`, naming the document and field).
  Warnings become notes.
* A NodePool's requirements are its template requirements, merged with its template labels
  and ``karpenter.sh/nodepool In [<name>]``; its instance types are the catalog's types the
  referenced EC2NodeClass can launch (a NodePool whose EC2NodeClass is not in the input gets
  the AL2023 defaults, with a note).
* The catalog is the bundled snapshot of the region (no network, no Redis). An EC2NodeClass
  is assumed to have a subnet in every zone of the region; ``zones`` narrows that.
* Other kinds (ConfigMap, Service, ...) are skipped with a note (a Service's selector still
  tells which pods it serves, for default topology spreads), so an
  application's manifests can be fed as they are.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from provisioning import crd
from provisioning.cloud.base import CapacityReservation, ResolvedNodeClass, Subnet
from provisioning.cloud.catalog import Catalog
from provisioning.cloud.reservations import from_status as reservations_from_status
from provisioning.crd.labels import NODEPOOL
from provisioning.scheduling.frozen import frozen_map
from provisioning.scheduling.overlays import Applied, Overlay, PoolTypes
from provisioning.scheduling.overlays import apply as apply_overlays
from provisioning.scheduling.plan import ClaimPlan, Plan
from provisioning.scheduling.pods import PodError
from provisioning.scheduling.quantity import QuantityError, to_int
from provisioning.scheduling.requirements import Requirement, Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot, StaticPool
from provisioning.scheduling.static import StaticPlan, plan_static
from provisioning.scheduling.taints import taints_from_list
from provisioning.scheduling.workloads import ExistingNode, Workloads, describe, expand_all

__all__ = [
    "HOURS_PER_MONTH",
    "SimulateError",
    "build_snapshot",
    "default_solver",
    "plan_documents",
    "plan_to_json",
    "plan_to_table",
    "resolve_zones",
]

HOURS_PER_MONTH = 730
DEFAULT_REGION = "us-east-1"
# What a NodePool gets when its EC2NodeClass is not among the documents.
DEFAULT_NODECLASS_SPEC: Mapping[str, Any] = {"amiSelectorTerms": [{"alias": "al2023@latest"}]}

Solver = Callable[[Snapshot], Plan]


class SimulateError(ValueError):
    """Invalid input: each problem names the document and the field
    (``NodePool general: spec.template.spec.requirements[0].operator: ...``). A problem given
    as a :class:`PodError` keeps them apart: ``causes`` lists them as a Kubernetes Status does
    (``field``, and the ``message`` naming the document)."""

    def __init__(self, problems: str | PodError | Sequence[str | PodError]) -> None:
        given = [problems] if isinstance(problems, str | PodError) else list(problems)
        self.problems = [str(problem) for problem in given]
        self.causes = [
            {"field": p.path, "message": f"{p.document}: {p.message}" if p.document else p.message}
            for p in given
            if isinstance(p, PodError) and p.path
        ]
        super().__init__("\n".join(self.problems))


# ------------------------------------------------------------------ documents → snapshot


def build_snapshot(documents: Iterable[Any], **options: Any) -> tuple[Snapshot, list[str]]:
    """The solver's input for ``documents`` (parsed YAML/JSON), and notes for people; see
    :func:`read_cluster` for the options. Raises :class:`SimulateError` on invalid input."""
    snapshot, notes, _ = read_cluster(documents, **options)
    return snapshot, notes


def overlay_report(policies: Iterable[Any], *, catalog: Catalog) -> tuple[list[NodePoolInput], Applied]:
    """What the NodeOverlays among ``policies`` (policy documents, as provisioning reads them)
    do to the NodePools' instance types (the same application, and cache, as every plan's),
    with the NodePools; for the overlays' status. Raises :class:`SimulateError` on invalid input."""
    notes: list[str] = []
    policies = _validate_policies([d for d in policies if isinstance(d, dict)], catalog, notes)
    nodeclasses, nodepools, overlays, _ = policies
    inputs = [
        nodepool
        for name, spec in _usable_nodepools(nodepools, notes)
        if (
            nodepool := _nodepool_input(
                name, spec, nodeclasses, catalog, None, (), notes, reservations=policies.reservations
            )
        )
        is not None
    ]
    return inputs, overlaid(inputs, overlays)


def read_cluster(
    documents: Iterable[Any],
    *,
    region: str = DEFAULT_REGION,
    catalog: Catalog | None = None,
    zones: Sequence[str] | None = None,
    unavailable: Callable[[str], bool] | None = None,
    max_pods: int | None = None,
    now: datetime | None = None,
    default_constraints: Sequence[Mapping[str, Any]] | None = None,
    preference_policy: str | None = None,
    min_values_policy: str | None = None,
    require_nodeclasses: bool = False,
) -> tuple[Snapshot, list[str], Workloads]:
    """The solver's input for ``documents`` (parsed YAML/JSON), notes for people, and the
    documents as read (every node with its pods, the PodDisruptionBudgets, the policies).

    ``catalog`` defaults to the bundled snapshot of ``region``; ``zones`` (``us-east-1a`` or
    just ``a``) limits the offerings to those zones, as subnets in only those zones would;
    ``unavailable`` (the ICE cache) marks offerings that cannot be launched now; more than
    ``max_pods`` pods is invalid input.
    Raises :class:`SimulateError` on invalid input.
    """
    if catalog is None:
        from provisioning.services.catalog import bundled_catalog

        catalog = bundled_catalog(region)
    notes: list[str] = []
    if catalog.fallback_reason:
        notes.append(f"catalog: {catalog.fallback_reason}")
    resolved_zones = resolve_zones(zones, catalog) if zones else None

    try:
        workloads = expand_all(documents, max_pods=max_pods)
    except PodError as exc:
        raise SimulateError(exc) from None
    for skipped in workloads.skipped:
        what = f"{skipped.kind} {skipped.name}" if skipped.name else skipped.kind
        notes.append(f"skipped {what}: {skipped.note.removesuffix('; skipped')}")

    policies = _validate_policies(workloads.policies, catalog, notes)
    nodeclasses, nodepools, overlays, _ = policies
    nodepools = _usable_nodepools(nodepools, notes)
    moment = now or datetime.now(UTC)
    nodes, rescheduled = _cluster_nodes(workloads, dict(nodepools), moment, notes)
    inputs = []
    for name, spec in nodepools:
        nodepool = _nodepool_input(
            name,
            spec,
            nodeclasses,
            catalog,
            resolved_zones,
            nodes,
            notes,
            require_nodeclasses,
            reservations=policies.reservations,
        )
        if nodepool is not None:
            inputs.append(nodepool)
    inputs = overlay_nodepools(inputs, overlays, notes)
    if unavailable is not None:
        inputs = [
            replace(p, instance_types=tuple(Catalog.mark_unavailable(p.instance_types, unavailable))) for p in inputs
        ]
    if not nodepools:
        notes.append("no NodePool in the input: no NodeClaim can be planned")
    nodes = _fill_uninitialized(nodes, inputs)
    inputs, static = _split_static(inputs, dict(nodepools), notes)

    listed = {node.name for node in workloads.nodes}
    for pod in workloads.pods:
        if pod.node_name and pod.node_name not in listed:
            notes.append(f"pod {pod.key} is bound to node {pod.node_name}, which is not in the input; ignored")
    pending = list(workloads.pending) + rescheduled
    policy = scheduling_policy()
    if default_constraints is None:
        default_constraints = policy["default_constraints"]
    if default_constraints:
        from provisioning.scheduling.defaults import Belonging, apply_defaults, read_constraints

        try:
            constraints = read_constraints(default_constraints)
        except PodError as exc:
            raise SimulateError(f"the scheduler configuration's PodTopologySpread {exc}") from None
        pending = apply_defaults(pending, constraints, Belonging(workloads.services, workloads.controllers))
    snapshot = Snapshot(
        pods=tuple(pending),
        nodepools=tuple(inputs),
        nodes=tuple(nodes),
        daemonsets=_daemon_pods(workloads),
        namespaces=dict(workloads.namespaces),
        preference_policy=preference_policy or policy["preference_policy"],
        min_values_policy=min_values_policy or policy["min_values_policy"],
        static_nodepools=tuple(static),
    )
    return snapshot, notes, workloads


def _split_static(
    inputs: list[NodePoolInput], specs: Mapping[str, dict[str, Any]], notes: list[str]
) -> tuple[list[NodePoolInput], list[StaticPool]]:
    """The dynamic NodePools (the solver's) and the static ones (``spec.replicas``): no pod
    opens a claim of a static NodePool; its nodes are counted like any others."""
    dynamic, static = [], []
    for pool in inputs:
        replicas = specs.get(pool.name, {}).get("replicas")
        if replicas is None:
            dynamic.append(pool)
            continue
        static.append(StaticPool(pool, int(replicas)))
        running = pool.in_use.get("nodes", 0)
        notes.append(
            f"NodePool {pool.name}: static (spec.replicas {int(replicas)}, {running} running): it keeps its nodes "
            f"and is never consolidated; pending pods open no NodeClaims of it"
        )
    return dynamic, static


def scheduling_policy() -> dict[str, Any]:
    """The solver's settings (upstream's PREFERENCE_POLICY, MIN_VALUES_POLICY, SCHEDULER_CONFIG):
    from Django's settings when configured, upstream's defaults otherwise."""
    try:
        from django.conf import settings

        return {
            "preference_policy": getattr(settings, "PREFERENCE_POLICY", "Respect"),
            "min_values_policy": getattr(settings, "MIN_VALUES_POLICY", "Strict"),
            "default_constraints": list(getattr(settings, "DEFAULT_TOPOLOGY_SPREAD", ())),
        }
    except Exception:  # noqa: BLE001  (no Django settings: a bare script)
        return {"preference_policy": "Respect", "min_values_policy": "Strict", "default_constraints": []}


# Taints a node carries while it starts, which go once it is initialized (upstream
# ``KnownEphemeralTaints``), and the prefix of the Node Readiness Controller's taints.
EPHEMERAL_TAINTS = frozenset(
    {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"),
        ("karpenter.sh/unregistered", "NoExecute"),
    }
)
EPHEMERAL_TAINT_PREFIXES = ("readiness.k8s.io/",)
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"


def _usable_nodepools(nodepools: list[tuple[str, dict[str, Any]]], notes: list[str]) -> list[tuple[str, dict]]:
    """The NodePools that may launch: not being deleted, and Ready when their status says."""
    out = []
    for name, spec, document in nodepools:
        metadata = document.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            notes.append(f"NodePool {name}: being deleted; it launches no NodeClaims")
            continue
        ready = next(
            (c for c in (document.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None
        )
        if ready is not None and ready.get("status") != "True":
            notes.append(f"NodePool {name}: not Ready ({ready.get('reason') or ready.get('status')}); left out")
            continue
        out.append((name, spec))
    return out


def _cluster_nodes(
    workloads, nodepools: Mapping[str, dict[str, Any]], now: datetime, notes: list[str]
) -> tuple[list[ExistingNode], list]:
    """The nodes pods may go to, and the pods of nodes being deleted that need a new home.

    A node marked for deletion (being deleted, or tainted karpenter.sh/disrupted) takes no
    pods; its pods that will be evicted and should run elsewhere are planned as pending (not
    DaemonSet or mirror pods, not those a PodDisruptionBudget blocks for good or that ask not
    to be disrupted). A NodePool's node that has not finished initializing keeps neither its
    startup taints nor the ephemeral ones: they are expected to go.
    """
    from provisioning.disruption.eviction import Limits, budget_from_manifest

    every_pod = [p for n in workloads.nodes for p in n.pods]
    limits = Limits(budget_from_manifest(b, every_pod) for b in workloads.budgets)
    nodes: list[ExistingNode] = []
    rescheduled = []
    for node in workloads.nodes:
        if node.deleting or any(t.key == DISRUPTED_TAINT_KEY for t in node.taints):
            moving = [p for p in node.pods if limits.currently_reschedulable(p, now)]
            rescheduled += [replace(p, node_name=None, deleting=False) for p in moving]
            if moving:
                notes.append(f"node {node.name} is being deleted: {len(moving)} of its pods are planned elsewhere")
            continue
        if node.managed and not node.initialized:
            spec = nodepools.get(node.labels.get(NODEPOOL, "")) or {}
            startup = taints_from_list(((spec.get("template") or {}).get("spec") or {}).get("startupTaints"))
            kept = tuple(
                t
                for t in node.taints
                if (t.key, t.effect) not in EPHEMERAL_TAINTS
                and not t.key.startswith(EPHEMERAL_TAINT_PREFIXES)
                and not any((s.key, s.effect) == (t.key, t.effect) for s in startup)
            )
            if len(kept) != len(node.taints):
                node = replace(node, taints=kept)
        nodes.append(node)
    return nodes, rescheduled


def _daemon_pods(workloads) -> tuple:
    """Each DaemonSet's overhead from one of its pods when one exists (the controller and
    admission may have changed what the template asks, as upstream reads it), with the
    template's node affinity in place of the pod's (the controller pins each pod to its node)."""
    from provisioning.scheduling.workloads import DaemonSetOverhead

    pods = {}
    for pod in workloads.pods:
        if pod.is_daemonset and pod.owner is not None:
            pods.setdefault((pod.namespace, pod.owner.name), pod)
    out = []
    for daemonset in workloads.daemonsets:
        pod = pods.get((daemonset.namespace, daemonset.name))
        if pod is not None:
            pod = replace(pod, required_node_affinity=daemonset.pod.required_node_affinity, node_name=None)
            daemonset = DaemonSetOverhead(daemonset.namespace, daemonset.name, pod)
        out.append(daemonset)
    return tuple(out)


def _fill_uninitialized(nodes: list[ExistingNode], inputs: Sequence[NodePoolInput]) -> list[ExistingNode]:
    """A NodePool's node not initialized yet may report zeros the kubelet has not filled in
    (GPUs, even cpu): its instance type's figures stand in for them, as upstream takes its
    NodeClaim's."""
    types = {(p.name, t.name): t for p in inputs for t in p.instance_types}
    out = []
    for node in nodes:
        it = types.get((node.labels.get(NODEPOOL, ""), node.labels.get("node.kubernetes.io/instance-type", "")))
        if node.managed and not node.initialized and it is not None:
            allocatable = dict(node.allocatable)
            capacity = dict(node.capacity)
            for name, amount in it.allocatable.items():
                if not allocatable.get(name):
                    allocatable[name] = amount
            for name, amount in it.capacity.items():
                if not capacity.get(name):
                    capacity[name] = amount
            node = replace(node, allocatable=frozen_map(allocatable), capacity=frozen_map(capacity))
        out.append(node)
    return out


def resolve_zones(zones: Sequence[str], catalog: Catalog) -> tuple[str, ...]:
    """Zone names from ``us-east-1a`` or ``a``; unknown zones are invalid input."""
    known = catalog.zones
    out: list[str] = []
    for raw in zones:
        zone = raw.strip()
        if not zone:
            continue
        if zone not in known and f"{catalog.region}{zone}" in known:
            zone = f"{catalog.region}{zone}"
        if zone not in known:
            raise SimulateError(f"--zones: {raw!r} is not a zone of {catalog.region} ({', '.join(known)})")
        if zone not in out:
            out.append(zone)
    if not out:
        raise SimulateError(f"--zones: no zone given (zones of {catalog.region}: {', '.join(known)})")
    return tuple(out)


class Policies(NamedTuple):
    """What ``_validate_policies`` read."""

    nodeclasses: dict[str, dict[str, Any]]
    nodepools: list[tuple[str, dict[str, Any], dict]]
    overlays: list[Overlay]
    reservations: dict[str, tuple[CapacityReservation, ...]]


def _validate_policies(policies: Sequence[dict], catalog: Catalog, notes: list[str]) -> Policies:
    """EC2NodeClass specs by name, NodePool specs in document order, defaulted, and the
    NodeOverlays; every error of every document at once. ``.reservations``: per EC2NodeClass,
    the capacity reservations its status lists."""
    problems: list[PodError] = []
    nodeclasses: dict[str, dict[str, Any]] = {}
    reservations: dict[str, tuple[CapacityReservation, ...]] = {}
    nodepools: list[tuple[str, dict[str, Any]]] = []
    overlays: list[Overlay] = []
    seen: set[tuple[str, str]] = set()
    labels = None
    catalog_aware = (crd.NODEPOOL.kind, crd.NODEOVERLAY.kind)
    for document in policies:
        kind = document.get("kind")
        if kind in catalog_aware and labels is None:
            labels = catalog.label_values()
        result = crd.validate(document, catalog_labels=labels if kind in catalog_aware else None)
        where = describe(document)
        if not result.ok:
            problems.extend(PodError(error.path, error.message, where) for error in result.errors)
            continue
        notes.extend(f"warning: {where}: {warning}" for warning in result.warnings)
        name = result.name
        if (kind, name) in seen:
            problems.append(PodError("metadata.name", f"{kind} {name} is defined more than once", where))
            continue
        seen.add((kind, name))
        spec = crd.default(document).get("spec") or {}
        if kind == crd.NODEPOOL.kind:
            nodepools.append((name, spec, document))
        elif kind == crd.NODEOVERLAY.kind:
            if not (document.get("metadata") or {}).get("deletionTimestamp"):
                overlays.append(Overlay.from_spec(name, spec))
        else:
            nodeclasses[name] = spec
            # The reservations its status lists (resolved from DescribeCapacityReservations, or
            # written into the document for a what-if) become reserved offerings.
            found = reservations_from_status(document.get("status"))
            if found:
                reservations[name] = found
    if problems:
        raise SimulateError(problems)
    return Policies(nodeclasses, nodepools, overlays, reservations)


def overlay_nodepools(
    inputs: Sequence[NodePoolInput], overlays: Sequence[Overlay], notes: list[str] | None = None
) -> list[NodePoolInput]:
    """The NodePools with the NodeOverlays laid over their instance types (THE catalog as the
    solver sees it: prices, extended resources, types without public pricing made
    launchable); an overlay left out for a conflict is noted."""
    if not overlays:
        return list(inputs)
    applied = overlaid(inputs, overlays)
    if notes is not None:
        notes.extend(f"NodeOverlay {name}: not applied: it {why}" for name, why in sorted(applied.conflicts.items()))
    return [replace(p, instance_types=applied.instance_types[p.name]) for p in inputs]


_OVERLAID: OrderedDict[tuple, tuple[Applied, tuple]] = OrderedDict()
_OVERLAID_LOCK = threading.Lock()
OVERLAID_KEPT = 8


def overlaid(inputs: Sequence[NodePoolInput], overlays: Sequence[Overlay]) -> Applied:
    """``overlays.apply`` over the NodePools, kept while the catalog's types, the NodePools'
    names and labels and the overlays stay the same: every provisioning run and disruption
    round reads the same policies, and laying an overlay over every offering takes a while."""
    key = (
        tuple((p.name, tuple(sorted(p.labels.items())), id(p.instance_types)) for p in inputs),
        tuple(
            (o.name, o.weight, o.price, o.price_adjustment, tuple(sorted(o.capacity.items())), o.requirements)
            for o in overlays
        ),
    )
    with _OVERLAID_LOCK:
        found = _OVERLAID.get(key)
        if found is not None:
            _OVERLAID.move_to_end(key)
            return found[0]
    applied = apply_overlays([PoolTypes(p.name, p.labels, p.instance_types) for p in inputs], overlays)
    with _OVERLAID_LOCK:
        # The types are kept with the answer, so the ids in the key cannot be reused meanwhile.
        _OVERLAID[key] = (applied, tuple(p.instance_types for p in inputs))
        while len(_OVERLAID) > OVERLAID_KEPT:
            _OVERLAID.popitem(last=False)
    return applied


def _nodepool_input(
    name: str,
    spec: dict[str, Any],
    nodeclasses: Mapping[str, dict[str, Any]],
    catalog: Catalog,
    zones: tuple[str, ...] | None,
    nodes: Sequence[ExistingNode],
    notes: list[str],
    require_nodeclass: bool = False,
    *,
    reservations: Mapping[str, tuple[CapacityReservation, ...]] | None = None,
) -> NodePoolInput | None:
    where = f"NodePool {name}"
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    labels = {key: str(value) for key, value in ((template.get("metadata") or {}).get("labels") or {}).items()}
    try:
        requirements = (
            Requirements.from_list(tspec.get("requirements"))
            .merge(Requirements.from_labels(labels))
            .add(Requirement.of(NODEPOOL, "In", (name,)))
        )
    except ValueError as exc:  # the validator lets nothing through that fails here
        raise SimulateError(PodError("spec.template.spec.requirements", str(exc), where)) from None
    limits: dict[str, int] = {}
    for resource, value in (spec.get("limits") or {}).items():
        try:
            limits[resource] = to_int(resource, value)
        except QuantityError as exc:
            raise SimulateError(PodError(f"spec.limits[{resource}]", str(exc), where)) from None

    ref = (tspec.get("nodeClassRef") or {}).get("name", "")
    nodeclass_spec = nodeclasses.get(ref)
    if nodeclass_spec is None and require_nodeclass:
        notes.append(f"{where}: EC2NodeClass {ref!r} does not exist, so the NodePool offers nothing; left out")
        return None
    if nodeclass_spec is None:
        subnets = "every zone" if zones is None else ", ".join(zones)
        notes.append(
            f"{where}: EC2NodeClass {ref!r} is not in the input; simulating with the AL2023 defaults "
            f"(subnets in {subnets})"
        )
        nodeclass_spec = dict(DEFAULT_NODECLASS_SPEC)
    resolved = None
    if zones is not None:
        subnets = tuple(Subnet(f"subnet-{zone}", zone, catalog.zone_ids.get(zone, "")) for zone in zones)
        resolved = ResolvedNodeClass(name=ref, ami_family="", subnets=subnets)
    # The built types themselves: NodeOverlays are laid over them (cached on their identity),
    # then the insufficient-capacity marks (``read_cluster``).
    instance_types = catalog.shapes(nodeclass_spec, resolved)
    if reservations and reservations.get(ref):
        instance_types = with_reservations(catalog, instance_types, reservations[ref])
    if not instance_types:
        notes.append(f"{where}: EC2NodeClass {ref!r} can launch no instance type of {catalog.region}")

    return NodePoolInput(
        name=name,
        requirements=requirements,
        instance_types=instance_types,
        weight=int(spec.get("weight") or 0),
        labels={**labels, NODEPOOL: name},
        taints=taints_from_list(tspec.get("taints")),
        startup_taints=taints_from_list(tspec.get("startupTaints")),
        limits=limits,
        in_use=_in_use(name, nodes),
        nodeclass=ref,
        annotations={str(k): str(v) for k, v in ((template.get("metadata") or {}).get("annotations") or {}).items()},
    )


# The types of an EC2NodeClass with its reservations' offerings, per (types, reservations): the
# same tuple while neither changes, so the solver's NodePool models (kept on its identity) are
# not rebuilt for every simulation of a disruption round.
_RESERVED: OrderedDict[tuple, tuple[tuple, tuple]] = OrderedDict()
_RESERVED_LOCK = threading.Lock()


def with_reservations(catalog: Catalog, shapes: tuple, reservations: tuple[CapacityReservation, ...]) -> tuple:
    key = (id(shapes), reservations)
    with _RESERVED_LOCK:
        found = _RESERVED.get(key)
        if found is not None and found[0] is shapes:
            _RESERVED.move_to_end(key)
            return found[1]
    built = catalog.with_reservations(shapes, reservations)
    with _RESERVED_LOCK:
        _RESERVED[key] = (shapes, built)
        while len(_RESERVED) > OVERLAID_KEPT:
            _RESERVED.popitem(last=False)
    return built


def _in_use(nodepool: str, nodes: Sequence[ExistingNode]) -> dict[str, int]:
    """The capacity of the listed nodes of ``nodepool`` (by their ``karpenter.sh/nodepool``
    label), and how many there are: what counts against the NodePool's limits."""
    used: dict[str, int] = {}
    count = 0
    for node in nodes:
        if node.labels.get(NODEPOOL) != nodepool:
            continue
        count += 1
        for resource, amount in (node.capacity or node.allocatable).items():
            used[resource] = used.get(resource, 0) + amount
    if count:
        used["nodes"] = count
    return used


# ------------------------------------------------------------------ solving


def default_solver() -> Solver:
    """THE solver (imported when first needed)."""
    from provisioning.scheduling.solver import solve

    return solve


def plan_documents(
    documents: Iterable[Any],
    *,
    region: str = DEFAULT_REGION,
    catalog: Catalog | None = None,
    zones: Sequence[str] | None = None,
    solver: Solver | None = None,
    max_pods: int | None = None,
    **options: Any,
) -> tuple[Snapshot, Plan, list[str]]:
    """Build the snapshot, solve it, and return ``(snapshot, plan, notes)``; ``options`` go to
    ``build_snapshot`` (the solver's policies, default topology spreads)."""
    snapshot, notes = build_snapshot(
        documents, region=region, catalog=catalog, zones=zones, max_pods=max_pods, **options
    )
    solve = solver if solver is not None else default_solver()
    started = time.perf_counter()
    plan = solve(snapshot)
    if not plan.solve_seconds:
        plan = replace(plan, solve_seconds=time.perf_counter() - started)
    return snapshot, plan, notes


# ------------------------------------------------------------------ output


def _price(value: float) -> float:
    return round(float(value), 6)


def _option_names(claim: ClaimPlan) -> list[str]:
    """Distinct instance type names in the claim's option order (the chosen type first)."""
    return list(dict.fromkeys(option.instance_type for option in claim.options))


def _unschedulable(plan: Plan, snapshot: Snapshot | None) -> list[tuple[str, str]]:
    """Unschedulable pods in input order (the plan's order for any the snapshot lacks)."""
    reasons = dict(plan.unschedulable)
    ordered: list[tuple[str, str]] = []
    if snapshot is not None:
        for pod in snapshot.pods:
            if pod.key in reasons:
                ordered.append((pod.key, reasons.pop(pod.key)))
    ordered.extend(reasons.items())
    return ordered


def plan_to_json(plan: Plan, snapshot: Snapshot, violations: Sequence[Any] | None = None) -> dict[str, Any]:
    """The plan as ``manage.py simulate --format json`` prints it, with what THE verifier
    finds wrong with it (``violations``: computed when not given)."""
    if violations is None:
        from provisioning.scheduling.verify import verify

        violations = verify(snapshot, plan)
    existing = dict(plan.existing)
    existing_nodes = [{"name": node.name, "pods": list(existing.pop(node.name, ()))} for node in snapshot.nodes]
    existing_nodes += [{"name": name, "pods": list(pods)} for name, pods in existing.items()]
    claims = [
        {
            "name": claim.name,
            "nodePool": claim.nodepool,
            "instanceType": claim.chosen.instance_type,
            "capacityType": claim.chosen.capacity_type,
            "zone": claim.chosen.zone,
            **({"capacityReservationId": claim.chosen.reservation_id} if claim.chosen.reservation_id else {}),
            "pricePerHour": _price(claim.price),
            "listPricePerHour": None if claim.chosen.listed is None else _price(claim.chosen.listed),
            "overlays": list(claim.chosen.overlays),
            "instanceTypeOptions": _option_names(claim),
            "pods": list(claim.pods),
        }
        for claim in plan.claims
    ]
    statics = plan_static(snapshot.static_nodepools)
    # Only when there are static NodePools, so the shape of a plan without any is unchanged.
    static_part = {"staticNodePools": [_static_json(s) for s in statics]} if statics else {}
    return {
        "nodeClaims": claims,
        "existingNodes": existing_nodes,
        "unschedulable": [{"pod": pod, "reason": reason} for pod, reason in _unschedulable(plan, snapshot)],
        **static_part,
        "totalPricePerHour": _price(sum(claim.price for claim in plan.claims) + sum(s.price for s in statics)),
        "stats": {"pods": len(snapshot.pods), "solveSeconds": round(float(plan.solve_seconds), 6)},
        "violations": [{"kind": v.kind, "nodeClaim": v.node, "pod": v.pod, "message": v.message} for v in violations],
    }


def _static_json(static: StaticPlan) -> dict[str, Any]:
    """A static NodePool as ``simulate`` reports it: its replicas, its nodes now, what
    scale-up would launch (template claims, no pods) and scale-down remove."""
    return {
        "nodePool": static.nodepool,
        "replicas": static.replicas,
        "nodes": static.running,
        "nodeLimit": static.node_limit,
        "launch": [
            {
                "instanceType": claim.chosen.instance_type,
                "capacityType": claim.chosen.capacity_type,
                "zone": claim.chosen.zone,
                "pricePerHour": _price(claim.price),
            }
            for claim in static.launch
        ],
        "remove": static.remove,
        "note": static.note,
    }


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [str(cell).rjust(widths[i]) if i in right else str(cell).ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def plan_to_table(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """The plan for people: NodeClaims to launch, pods placed on existing nodes, unschedulable
    pods with their reasons, and the total per hour and per month (730 hours)."""
    lines: list[str] = []
    total = sum(claim.price for claim in plan.claims)
    if plan.claims:
        rows = [
            (
                claim.name,
                claim.nodepool,
                claim.chosen.instance_type,
                claim.chosen.capacity_type,
                claim.chosen.zone,
                f"{claim.price:.4f}",
                str(len(claim.pods)),
            )
            for claim in plan.claims
        ]
        header: tuple[str, ...] = ("NODECLAIM", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS")
        if any(claim.chosen.overlays for claim in plan.claims):
            # Effective prices above; the list price and the NodeOverlays that changed it beside.
            header += ("LIST $/HOUR", "NODEOVERLAYS")
            rows = [
                (*row, "-" if c.chosen.listed is None else f"{c.chosen.listed:.4f}", ",".join(c.chosen.overlays))
                for row, c in zip(rows, plan.claims, strict=True)
            ]
        lines += _columns(header, rows, right=frozenset({5, 6, 7}))
    else:
        lines.append("No NodeClaims to launch.")
    placed = [(name, pods) for name, pods in plan.existing.items() if pods]
    if placed:
        lines.append("")
        rows = [(name, str(len(pods))) for name, pods in placed]
        lines += _columns(("EXISTING NODE", "NEW PODS"), rows, right=frozenset({1}))
    unschedulable = _unschedulable(plan, snapshot)
    if unschedulable:
        lines.append("")
        lines += _columns(("UNSCHEDULABLE POD", "REASON"), unschedulable)
    statics = plan_static(snapshot.static_nodepools) if snapshot is not None else []
    if statics:
        lines.append("")
        rows = [
            (
                s.nodepool,
                str(s.replicas),
                str(s.running),
                str(len(s.launch)),
                str(s.remove),
                s.launch[0].chosen.instance_type if s.launch else "-",
                f"{s.price:.4f}",
                s.note,
            )
            for s in statics
        ]
        header = ("STATIC NODEPOOL", "REPLICAS", "NODES", "TO LAUNCH", "TO REMOVE", "INSTANCE TYPE", "$/HOUR", "NOTE")
        lines += _columns(header, rows, right=frozenset({1, 2, 3, 4, 6}))
        total += sum(s.price for s in statics)
    on_claims = sum(len(claim.pods) for claim in plan.claims)
    on_nodes = sum(len(pods) for _, pods in placed)
    lines.append("")
    claims = f"{len(plan.claims)} NodeClaim{'' if len(plan.claims) == 1 else 's'}"
    launching = sum(len(s.launch) for s in statics)
    static_part = f" and {launching} for static NodePools" if launching else ""
    lines.append(
        f"Plan: {claims} to launch for {on_claims} pods{static_part}, {on_nodes} pods on existing nodes, "
        f"{len(unschedulable)} unschedulable."
    )
    lines.append(f"Total: ${total:,.4f}/hour, ${total * HOURS_PER_MONTH:,.2f}/month ({HOURS_PER_MONTH} h).")
    return "\n".join(lines) + "\n"
