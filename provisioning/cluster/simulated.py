"""The embedded default cluster: pods and nodes are rows (``ClusterPod``, ``ClusterNode``).

Workloads submitted with ``manage.py sim apply`` become pods named as ``simulate`` names
them (``<workload>-<i>``). A simulated kubelet turns launched NodeClaims into Ready nodes
after a delay, and a simulated scheduler binds pending pods to Ready nodes that fit them,
through THE solver with no NodePool (so only existing nodes count), never a second copy of
its rules.

PodDisruptionBudgets (policy/v1) applied the same way are rows too (``ClusterPDB``); their
status is computed from the pods whenever it is read, as the disruption controller writes
it, and ``evict`` refuses what the Eviction API would refuse.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import CharField, Count, Q
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast
from django.utils import timezone

from provisioning.cluster.base import Event, Eviction, Manifest, ObjectEvent
from provisioning.disruption.eviction import Budget, budget_from_manifest, disruptions_allowed
from provisioning.models import ClusterNode, ClusterPDB, ClusterPod, NodeClaim
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.labelselector import LabelSelector
from provisioning.scheduling.manifestfields import PodError
from provisioning.scheduling.pdbspec import PDB_KIND, read_budget
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.workloads import REPLICATED_KINDS, expand_all

log = logging.getLogger(__name__)

POD_KINDS = ("Pod", *REPLICATED_KINDS, "Job")


# ------------------------------------------------------------------ the Cluster protocol


class SimulatedCluster:
    """``Cluster`` over the database rows."""

    def pods(self) -> list[Manifest]:
        return [pod_manifest(p) for p in ClusterPod.objects.all()]

    def nodes(self) -> list[Manifest]:
        return [n.manifest for n in ClusterNode.objects.all()]

    def daemonsets(self) -> list[Manifest]:
        return []

    def pdbs(self) -> list[Manifest]:
        return budget_manifests()

    def create_nodeclaim(self, manifest: Manifest) -> None:
        """The NodeClaim row is the record here; nothing else to create."""

    def delete_nodeclaim(self, name: str) -> None:
        """As above."""

    def cordon(self, node: str) -> None:
        self._edit(node, lambda m: m.setdefault("spec", {}).__setitem__("unschedulable", True))

    def taint(self, node: str, taint: Manifest) -> None:
        def add(manifest: Manifest) -> None:
            taints = manifest.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in taints):
                taints.append(dict(taint))

        self._edit(node, add)

    def untaint(self, node: str, taint: Manifest) -> None:
        def remove(manifest: Manifest) -> None:
            spec = manifest.setdefault("spec", {})
            gone = (taint["key"], taint["effect"])
            spec["taints"] = [t for t in spec.get("taints") or [] if (t.get("key"), t.get("effect")) != gone]
            spec.pop("unschedulable", None)

        self._edit(node, remove)

    def label(self, node: str, key: str, value: str) -> None:
        self._edit(node, lambda m: m.setdefault("metadata", {}).setdefault("labels", {}).__setitem__(key, value))

    def unlabel(self, node: str, key: str) -> None:
        self._edit(node, lambda m: m.setdefault("metadata", {}).setdefault("labels", {}).pop(key, None))

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Deleted whatever guards its eviction; its controller recreates it, pending (the
        simulated kubelet stops a pod at once, whatever its grace period)."""
        ClusterPod.objects.filter(namespace=namespace, name=name).update(
            phase=ClusterPod.Phase.PENDING, node_name="", nominated="", bound_at=None
        )

    def evict(self, namespace: str, name: str) -> Eviction:
        """The Eviction API: False (its 429) when the pod's PodDisruptionBudget allows no
        disruption now, or when more than one selects it; otherwise the pod goes, and the
        workload's controller recreates it: it is pending again. A pod that is not running
        goes without asking; one that is not Ready goes when its budget has
        ``unhealthyPodEvictionPolicy: AlwaysAllow`` or (the default, IfHealthyBudget) holds
        its desired healthy pods. The budgets are locked while deciding, so two evictions
        against one budget are decided one after the other."""
        with transaction.atomic():
            row = ClusterPod.objects.select_for_update().filter(namespace=namespace, name=name).first()
            if row is None:
                return Eviction.GONE  # as the API's 404: nothing is left to evict
            if row.node_name and row.phase == ClusterPod.Phase.RUNNING:
                refused = _eviction_refused(row)
                if refused is not None:
                    return refused
            ClusterPod.objects.filter(pk=row.pk).update(
                phase=ClusterPod.Phase.PENDING, node_name="", nominated="", bound_at=None
            )
        return Eviction.EVICTED

    def record_event(self, event: ObjectEvent) -> None:
        """No Events API here: a debug log line is the record (the dashboard shows the same)."""
        ref = event.involved
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        log.debug("event %s %s %s %s: %s", event.type, event.reason, ref.kind, where, event.message)

    def delete_node(self, node: str) -> None:
        with transaction.atomic():
            ClusterPod.objects.filter(node_name=node).update(
                phase=ClusterPod.Phase.PENDING, node_name="", nominated="", bound_at=None
            )
            ClusterNode.objects.filter(name=node).delete()

    def watch(self, handle: Callable[[Event], None], kinds: Iterable[str], stop: Callable[[], bool]) -> None:
        """Nothing to watch: submissions call the pipeline directly."""

    @staticmethod
    def _edit(node: str, change: Callable[[Manifest], None]) -> None:
        with transaction.atomic():
            row = ClusterNode.objects.select_for_update().filter(name=node).first()
            if row is None:
                return
            manifest = copy.deepcopy(row.manifest)
            change(manifest)
            row.manifest = manifest
            row.save(update_fields=["manifest"])


# ------------------------------------------------------------------ manifests


def pod_manifest(pod: ClusterPod) -> Manifest:
    """The pod as the API would show it: bound (``spec.nodeName``, Running) or pending
    (PodScheduled False, Unschedulable)."""
    # Copies of the parts it changes only: the rest is shared with the row, which is read
    # afresh for every call and never saved from here (a deep copy of 1,000 pods costs a
    # provisioning run 0.2 s).
    manifest = dict(pod.manifest)
    metadata = manifest["metadata"] = dict(manifest.get("metadata") or {})
    metadata.update(namespace=pod.namespace, name=pod.name, uid=str(pod.uid))
    metadata.setdefault("creationTimestamp", pod.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    spec = manifest["spec"] = dict(manifest.get("spec") or {})
    if pod.node_name:
        spec["nodeName"] = pod.node_name
        finished = pod.phase in (ClusterPod.Phase.SUCCEEDED, ClusterPod.Phase.FAILED)
        manifest["status"] = {"phase": pod.phase if finished else "Running"}
        if pod.bound_at is not None:  # the simulated kubelet starts a pod as it is bound
            manifest["status"]["startTime"] = pod.bound_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        spec.pop("nodeName", None)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        if pod.unschedulable_reason:
            condition["message"] = pod.unschedulable_reason
        manifest["status"] = {"phase": "Pending", "conditions": [condition]}
    return manifest


def node_manifest(
    name: str,
    instance_type: InstanceType,
    *,
    zone: str,
    capacity_type: str,
    nodepool: str,
    labels: dict[str, str] | None = None,
    taints: Sequence[Manifest] = (),
    provider_id: str = "",
    ready: bool = True,
) -> Manifest:
    """A Node with the labels, taints and allocatable of its instance type."""
    all_labels = {
        **instance_type.labels,
        **(labels or {}),
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": capacity_type,
        "karpenter.sh/nodepool": nodepool,
        "node.kubernetes.io/instance-type": instance_type.name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"providerID": provider_id, "taints": [dict(t) for t in taints]},
        "status": {
            "capacity": _quantities(instance_type.capacity),
            "allocatable": _quantities(instance_type.allocatable),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _quantities(amounts: dict[str, int]) -> dict[str, str]:
    return {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in amounts.items()}


# ------------------------------------------------------------------ workloads


class SubmitError(ValueError):
    """Invalid workload documents; the message names the document and field."""


def workload_pods(documents: Sequence[Any]) -> tuple[list[Manifest], list[str]]:
    """Pod manifests for the workloads in ``documents`` (named as ``simulate`` names them),
    and notes for the documents skipped. Validated by the solver's parser first."""
    try:
        workloads = expand_all(documents)
    except PodError as exc:
        raise SubmitError(str(exc)) from None
    notes = [f"skipped {s.kind} {s.name}".strip() for s in workloads.skipped]
    pods: list[Manifest] = []
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") not in POD_KINDS:
            continue
        pods += _materialize(document)
    return pods, notes


def _materialize(document: Manifest) -> list[Manifest]:
    kind = document["kind"]
    metadata = document.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    if kind == "Pod":
        manifest = copy.deepcopy(document)
        manifest.setdefault("metadata", {})["namespace"] = namespace
        return [manifest]
    spec = document.get("spec") or {}
    template = spec.get("template") or {}
    if kind == "Job":
        count = 0 if spec.get("suspend") else int(spec.get("parallelism", 1))
    else:
        count = int(spec.get("replicas", 1))
    name = metadata["name"]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}",
                "namespace": namespace,
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [{"kind": kind, "name": name}],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        for i in range(count)
    ]


def apply_pods(manifests: Sequence[Manifest]) -> list[str]:
    """Create the pods that do not exist yet (pending), in one insert; returns their keys."""
    wanted = {}
    for manifest in manifests:
        meta = manifest["metadata"]
        wanted[(meta["namespace"], meta["name"])] = manifest
    namespaces = {ns for ns, _ in wanted}
    existing = set(
        ClusterPod.objects.filter(namespace__in=namespaces, name__in=[n for _, n in wanted]).values_list(
            "namespace", "name"
        )
    )
    rows = []
    for (namespace, name), manifest in wanted.items():
        if (namespace, name) in existing:
            continue
        owner = next(iter(manifest["metadata"].get("ownerReferences") or []), None)
        rows.append(
            ClusterPod(
                namespace=namespace,
                name=name,
                manifest=manifest,
                owner=f"{owner['kind']}/{owner['name']}" if owner else "",
                **ClusterPod.request_columns(manifest),
            )
        )
    # A pod created meanwhile by another submitter is skipped, not an error.
    ClusterPod.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return [f"{r.namespace}/{r.name}" for r in rows]


def delete_pods(manifests: Sequence[Manifest]) -> int:
    deleted = 0
    for manifest in manifests:
        meta = manifest["metadata"]
        pod = ClusterPod.objects.filter(namespace=meta["namespace"], name=meta["name"]).first()
        if pod is not None:
            _touch(pod.node_name)
            pod.delete()
            deleted += 1
    return deleted


def scale(namespace: str, kind: str, name: str, template: Manifest, replicas: int) -> tuple[list[str], int]:
    """Set a simulated workload's replicas: create the missing pods, delete the extra ones."""
    document = {
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "template": template},
    }
    created = apply_pods(_materialize(document))
    extra = ClusterPod.objects.filter(namespace=namespace, owner=f"{kind}/{name}")
    removed = 0
    for pod in extra:
        index = pod.name.rsplit("-", 1)[-1]
        if index.isdigit() and int(index) >= replicas:
            _touch(pod.node_name)
            pod.delete()
            removed += 1
    return created, removed


def _touch(node_name: str) -> None:
    if node_name:
        ClusterNode.objects.filter(name=node_name).update(last_pod_change_at=timezone.now())


# ------------------------------------------------------------------ PodDisruptionBudgets


def budget_documents(documents: Sequence[Any]) -> list[Manifest]:
    """The PodDisruptionBudgets of ``documents``, validated and as they are stored (namespace
    set, no status or server fields). Raises :class:`SubmitError` naming the document and
    the field."""
    try:
        return [read_budget(d) for d in documents if isinstance(d, dict) and d.get("kind") == PDB_KIND]
    except PodError as exc:
        raise SubmitError(str(exc)) from None


def apply_budgets(manifests: Sequence[Manifest]) -> list[tuple[str, str]]:
    """Store validated budgets; returns (``ns/name``, created | configured | unchanged)."""
    results = []
    for manifest in manifests:
        meta = manifest["metadata"]
        row, created = ClusterPDB.objects.get_or_create(
            namespace=meta["namespace"], name=meta["name"], defaults={"manifest": manifest}
        )
        if created:
            results.append((row.key, "created"))
        elif row.manifest == manifest:
            results.append((row.key, "unchanged"))
        else:
            ClusterPDB.objects.filter(pk=row.pk).update(manifest=manifest)
            results.append((row.key, "configured"))
    return results


def delete_budgets(manifests: Sequence[Manifest]) -> list[str]:
    """Delete the budgets named; returns the keys of those that existed."""
    deleted = []
    for manifest in manifests:
        meta = manifest["metadata"]
        if ClusterPDB.objects.filter(namespace=meta["namespace"], name=meta["name"]).delete()[0]:
            deleted.append(f"{meta['namespace']}/{meta['name']}")
    return deleted


def budget_manifests() -> list[Manifest]:
    """Every stored budget as the API shows it, with the status computed now."""
    return [_with_status(row) for row in ClusterPDB.objects.all()]


def budget_status(manifest: Manifest, namespace: str) -> Manifest:
    """The status the disruption controller writes for a policy/v1 budget over the pods of
    ``namespace``: the pods it selects are expected, the Ready ones healthy (a pod bound to a
    Ready node and running); a percent is of the expected pods, rounded up; no disruption is
    allowed while no pod is expected (nor by a budget with neither minAvailable nor
    maxUnavailable). A null selector selects no pod, an empty one every pod of the namespace.
    Counted by the database: a namespace may hold thousands of pods, and the Eviction API asks
    this for every eviction a budget guards."""
    spec = manifest.get("spec") or {}
    selected = _selected(namespace, budget_from_manifest(manifest).selector)
    counts = selected.aggregate(expected=Count("pk"), healthy=Count("pk", filter=_READY))
    expected, healthy = counts["expected"], counts["healthy"]
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:  # neither: the controller's getExpectedPodCount expects no pod, so nothing is allowed
        expected = desired = 0
    # The controller allows no more than the healthy pods, and nothing with none expected.
    allowed = min(disruptions_allowed(spec, expected, healthy), healthy) if expected else 0
    return {
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": allowed,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed else "False",
                "reason": "SufficientPods" if allowed else "InsufficientPods",
            }
        ],
    }


# A pod counts as healthy when it runs on a node that is Ready.
_READY = (
    Q(phase=ClusterPod.Phase.RUNNING)
    & ~Q(node_name="")
    & ~Q(node_name__in=ClusterNode.objects.filter(ready=False).values("name"))
)


def _selected(namespace: str, selector: LabelSelector):
    """The pods of ``namespace`` ``selector`` selects, as a query on their labels."""
    rows = ClusterPod.objects.filter(namespace=namespace)
    if selector.null:
        return rows.none()
    labels = KeyTransform("labels", KeyTransform("metadata", "manifest"))
    terms = [(key, "In", frozenset({value})) for key, value in selector.match_labels]
    for number, (key, operator, values) in enumerate([*terms, *selector.match_expressions]):
        name = f"label_{number}"
        # As text: a JSON key's own lookups would read the values compared with as JSON.
        rows = rows.annotate(**{name: Cast(KeyTextTransform(key, labels), CharField())})
        if operator == "In":
            rows = rows.filter(**{f"{name}__in": sorted(values)})
        elif operator == "NotIn":
            # A pod without the label is selected (SQL's NOT IN alone would drop it: NULL).
            rows = rows.filter(Q(**{f"{name}__isnull": True}) | ~Q(**{f"{name}__in": sorted(values)}))
        elif operator == "Exists":
            rows = rows.filter(**{f"{name}__isnull": False})
        else:  # DoesNotExist
            rows = rows.filter(**{f"{name}__isnull": True})
    return rows


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)  # rounded up
    return int(value or 0)


def _with_status(row: ClusterPDB) -> Manifest:
    manifest = copy.deepcopy(row.manifest)
    metadata = manifest.setdefault("metadata", {})
    metadata.update(namespace=row.namespace, name=row.name, uid=str(row.uid))
    metadata.setdefault("creationTimestamp", row.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    manifest["status"] = budget_status(manifest, row.namespace)
    return manifest


def _eviction_refused(row: ClusterPod) -> Eviction | None:
    """How the Eviction API would refuse to evict this running pod now (its 429, or its 500 for
    a pod two budgets select), or None. Logs why. Called in a transaction: the budgets of its
    namespace are locked."""
    labels = (row.manifest.get("metadata") or {}).get("labels") or {}
    evicted = Pod(namespace=row.namespace, name=row.name, labels=labels)
    budgets: list[tuple[Budget, Manifest]] = []
    for pdb in ClusterPDB.objects.select_for_update().filter(namespace=row.namespace):
        if budget_from_manifest(pdb.manifest).selects(evicted):
            status = budget_status(pdb.manifest, row.namespace)
            budgets.append((budget_from_manifest({**pdb.manifest, "status": status}), status))
    if len(budgets) > 1:
        names = ", ".join(b.key for b, _ in budgets)
        log.warning("eviction of pod %s refused: more than one PodDisruptionBudget selects it (%s)", row.key, names)
        return Eviction.REFUSED_MANY_BUDGETS
    if not budgets:
        return None
    budget, status = budgets[0]
    if ClusterNode.objects.filter(name=row.node_name, ready=False).exists():  # the pod is not Ready
        if budget.always_evict_unhealthy:
            return None  # AlwaysAllow: an unhealthy pod goes and takes nothing from the budget
        if status["currentHealthy"] >= status["desiredHealthy"] > 0:
            return None  # IfHealthyBudget: the budget holds without it
    if status["disruptionsAllowed"] > 0:
        return None
    log.info(
        "eviction of pod %s refused: it would violate PodDisruptionBudget %s (%d healthy, %d desired)",
        row.key,
        budget.key,
        status["currentHealthy"],
        status["desiredHealthy"],
    )
    return Eviction.REFUSED


def set_conditions(node: str, conditions: Sequence[tuple[str, str]], seconds_ago: float = 0.0) -> None:
    """Set a node's conditions (type, status) as its kubelet or node monitoring agent would,
    changed ``seconds_ago``; Ready says whether the node is Ready. Raises SubmitError for an
    unknown node."""
    since = (timezone.now() - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with transaction.atomic():
        row = ClusterNode.objects.select_for_update().filter(name=node).first()
        if row is None:
            known = ", ".join(ClusterNode.objects.order_by("name").values_list("name", flat=True)[:5]) or "none"
            raise SubmitError(f"node {node!r} is not in the simulated cluster (nodes: {known})")
        status = row.manifest.setdefault("status", {})
        current = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        for kind, value in conditions:
            before = current.get(kind) or {}
            changed = before.get("status") != value or seconds_ago
            current[kind] = {
                "type": kind,
                "status": value,
                "lastTransitionTime": since if changed else before.get("lastTransitionTime", since),
                "reason": f"{kind}{value}",
                "message": "set with manage.py sim node",
            }
        status["conditions"] = list(current.values())
        ready = (current.get("Ready") or {}).get("status", "True" if row.ready else "False") == "True"
        ClusterNode.objects.filter(pk=row.pk).update(manifest=row.manifest, ready=ready)


# ------------------------------------------------------------------ kubelet and scheduler


def register_launched(delay_seconds: float, instance_type_of: Callable[[str], InstanceType | None]) -> list[str]:
    """The simulated kubelet: every claim launched at least ``delay_seconds`` ago gets its
    Node (Ready, with its instance type's labels, taints and allocatable); the claim moves
    Launched → Registered → Initialized."""
    cutoff = timezone.now() - timedelta(seconds=delay_seconds)
    registered = []
    for claim in NodeClaim.objects.filter(state=NodeClaim.State.LAUNCHED, launched_at__lte=cutoff):
        it = instance_type_of(claim.instance_type)
        if it is None:
            log.warning("nodeclaim %s: instance type %s is not in the catalog", claim.name, claim.instance_type)
            continue
        it = claim.with_overlay_capacity(it)  # as the device plugins of the NodeOverlays would report
        name = f"ip-{claim.instance_id.removeprefix('i-')[:12]}.ec2.internal"
        labels = claim.node_labels()
        labels.update({"karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"})
        manifest = node_manifest(
            name,
            it,
            zone=claim.zone,
            capacity_type=claim.capacity_type,
            nodepool=claim.nodepool_name,
            labels=labels,
            taints=claim.spec.get("taints") or (),
            provider_id=claim.provider_id,
        )
        now = timezone.now()
        with transaction.atomic():
            if not claim.move(NodeClaim.State.LAUNCHED, NodeClaim.State.REGISTERED, node_name=name, registered_at=now):
                continue
            ClusterNode.objects.update_or_create(
                name=name,
                defaults={
                    "manifest": manifest,
                    "nodeclaim": claim.name,
                    "nodepool": claim.nodepool_name,
                    "instance_id": claim.instance_id,
                    "ready": True,
                    "last_pod_change_at": now,
                },
            )
            claim.move(NodeClaim.State.REGISTERED, NodeClaim.State.INITIALIZED, initialized_at=now)
        registered.append(name)
    return registered


def bind_pending(solve: Callable[[Snapshot], Any]) -> int:
    """The simulated scheduler: bind pending pods to Ready nodes that fit them, as the
    solver places pods on existing nodes (no NodePool in the snapshot, so nothing new).
    Pods nominated to a NodeClaim go to its node first, where the plan made room for them."""
    pending = list(ClusterPod.objects.filter(node_name=""))
    ready = {n.name: n for n in ClusterNode.objects.filter(ready=True)}
    if not pending or not ready:
        return 0
    bound_pods = list(ClusterPod.objects.exclude(node_name=""))
    node_of = dict(NodeClaim.objects.exclude(node_name="").values_list("name", "node_name"))
    nominated: dict[str, list[ClusterPod]] = {}
    for pod in pending:
        node = node_of.get(pod.nominated)
        if node in ready:
            nominated.setdefault(node, []).append(pod)
    bound = 0
    for node, pods in nominated.items():
        on_node = [p for p in bound_pods if p.node_name == node]
        bound += _bind(solve, [ready[node]], on_node, pods)
    if bound:
        bound_pods = list(ClusterPod.objects.exclude(node_name=""))
    rest = list(ClusterPod.objects.filter(node_name=""))
    if rest:
        bound += _bind(solve, list(ready.values()), bound_pods, rest)
    return bound


def _bind(solve: Callable[[Snapshot], Any], nodes: list[ClusterNode], bound: list[ClusterPod], pending) -> int:
    taken = {p.pk for p in bound}
    pending = [p for p in pending if p.pk not in taken]
    documents = [n.manifest for n in nodes] + [pod_manifest(p) for p in bound] + [pod_manifest(p) for p in pending]
    workloads = expand_all(documents)
    plan = solve(Snapshot(pods=workloads.pending, nodepools=(), nodes=workloads.nodes))
    by_key = {p.key: p for p in pending}
    now = timezone.now()
    count = 0
    for node, keys in plan.existing.items():
        for key in keys:
            pod = by_key.get(key)
            if pod is None:
                continue
            count += ClusterPod.objects.filter(pk=pod.pk, node_name="").update(
                node_name=node, phase=ClusterPod.Phase.RUNNING, bound_at=now, nominated="", unschedulable_reason=""
            )
        ClusterNode.objects.filter(name=node).update(last_pod_change_at=now)
    return count
