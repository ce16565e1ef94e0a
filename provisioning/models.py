"""Models mirroring the Karpenter CRDs, and the audit log of every change to them.

The spec is stored as the JSON the user wrote (after API-server defaulting), so a
manifest round-trips exactly; the few fields that queries need are copied into indexed
columns when it is saved.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from provisioning import crd
from provisioning.fields import LargeJSONField


class CustomResource(models.Model):
    """What every cluster-scoped custom resource has: metadata, spec, status."""

    crd_kind: ClassVar[crd.Kind]

    name = models.CharField(max_length=253, unique=True)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    generation = models.PositiveBigIntegerField(default=1)
    resource_version = models.PositiveBigIntegerField(default=1)
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    spec = models.JSONField(default=dict)
    status = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def to_manifest(self, *, server_fields: bool = True) -> dict[str, Any]:
        """The object as ``kubectl get -o yaml`` shows it (or, without server fields,
        as it would be written for ``kubectl apply``)."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        if server_fields:
            metadata["uid"] = str(self.uid)
            metadata["generation"] = self.generation
            metadata["resourceVersion"] = str(self.resource_version)
            if self.created_at:
                metadata["creationTimestamp"] = self.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        manifest: dict[str, Any] = {
            "apiVersion": self.crd_kind.api_version,
            "kind": self.crd_kind.kind,
            "metadata": metadata,
        }
        if self.spec or self.crd_kind.spec_required:
            manifest["spec"] = self.spec
        if server_fields and self.status:
            manifest["status"] = self.status
        return manifest

    def index_spec(self) -> None:
        """Copy what queries need out of the spec; subclasses add their columns."""

    def clean(self) -> None:
        result = crd.validate(self.to_manifest(server_fields=False))
        if not result.ok:
            raise ValidationError([f"{e.path}: {e.message}" for e in result.errors])


class NodePool(CustomResource):
    """karpenter.sh/v1 NodePool: what may be launched, under which limits."""

    crd_kind = crd.NODEPOOL

    node_class_name = models.CharField(max_length=253, db_index=True, blank=True)
    weight = models.IntegerField(default=0, db_index=True)

    class Meta(CustomResource.Meta):
        ordering = ["-weight", "name"]

    def index_spec(self) -> None:
        ref = (self.spec.get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
        self.node_class_name = ref.get("name", "") if ref.get("kind") == "EC2NodeClass" else ""
        self.weight = int(self.spec.get("weight") or 0)

    @property
    def consolidation_policy(self) -> str:
        """The effective policy (the v1beta1 name ``WhenUnderutilized`` is mapped)."""
        return crd.nodepool.effective_consolidation_policy(self.spec)


class EC2NodeClass(CustomResource):
    """karpenter.k8s.aws/v1 EC2NodeClass: how instances are configured on AWS."""

    crd_kind = crd.EC2NODECLASS

    class Meta(CustomResource.Meta):
        verbose_name = "EC2NodeClass"
        verbose_name_plural = "EC2NodeClasses"

    @property
    def ready_condition(self) -> dict[str, Any] | None:
        """The status's Ready condition, once the selectors were resolved."""
        for condition in self.status.get("conditions") or []:
            if isinstance(condition, dict) and condition.get("type") == "Ready":
                return condition
        return None

    @property
    def identity(self) -> str:
        """The IAM role, or the instance profile, nodes launch with."""
        return self.spec.get("role") or self.spec.get("instanceProfile") or ""

    @property
    def ami_selector(self) -> str:
        """The AMI selector terms in a few words (``al2023@latest``, ``ami-0abc``...)."""
        words = []
        for term in self.spec.get("amiSelectorTerms") or []:
            if not isinstance(term, dict):
                continue
            for key in ("alias", "id", "name", "ssmParameter"):
                if term.get(key):
                    words.append(str(term[key]))
                    break
            else:
                words.append("tags " + ",".join(f"{k}={v}" for k, v in (term.get("tags") or {}).items()))
        return ", ".join(words)


class NodeOverlay(CustomResource):
    """karpenter.sh/v1alpha1 NodeOverlay: prices and extended resources laid over the catalog
    for the instance types and offerings its requirements match."""

    crd_kind = crd.NODEOVERLAY

    weight = models.IntegerField(default=0, db_index=True)

    class Meta(CustomResource.Meta):
        ordering = ["-weight", "name"]

    def index_spec(self) -> None:
        self.weight = crd.nodeoverlay.weight_of(self.spec)

    @property
    def effect(self) -> str:
        """What it does, in a few words: ``price 0.42/h``, ``price -27%``, ``capacity example.com/fuse 1``."""
        parts = []
        if self.spec.get("price") is not None:
            parts.append(f"price {self.spec['price']}/h")
        adjustment = self.spec.get("priceAdjustment")
        if adjustment is not None:
            parts.append(f"price {adjustment}" + ("" if str(adjustment).endswith("%") else "/h"))
        capacity = self.spec.get("capacity") or {}
        if capacity:
            parts.append("capacity " + ", ".join(f"{k} {v}" for k, v in capacity.items()))
        return "; ".join(parts)

    @property
    def matches(self) -> str:
        """Its requirements in a few words: ``instance-family In m7i, c7i; capacity-type In on-demand``."""
        parts = []
        for r in self.spec.get("requirements") or []:
            if not isinstance(r, dict):
                continue
            key = str(r.get("key", "")).rsplit("/", 1)[-1]
            values = ", ".join(str(v) for v in r.get("values") or [])
            parts.append(f"{key} {r.get('operator', '')} {values}".strip())
        return "; ".join(parts) or "every instance type"

    def condition(self, kind: str) -> dict[str, Any] | None:
        """The status condition of that type (Ready, ValidationSucceeded), once evaluated."""
        for condition in self.status.get("conditions") or []:
            if isinstance(condition, dict) and condition.get("type") == kind:
                return condition
        return None

    @property
    def ready(self) -> dict[str, Any] | None:
        """Ready: applied (True), or left out for a conflict (False, with why)."""
        return self.condition("Ready")


RESOURCE_MODELS: dict[str, type[CustomResource]] = {
    "NodePool": NodePool,
    "EC2NodeClass": EC2NodeClass,
    "NodeOverlay": NodeOverlay,
}


class AuditEntry(models.Model):
    """One change to one resource: who, when, through what, and the diff."""

    class Action(models.TextChoices):
        CREATED = "created"
        UPDATED = "updated"
        DELETED = "deleted"

    class Source(models.TextChoices):
        UI = "ui"
        REST = "rest"
        KUBECTL = "kubectl", "kubectl (cluster sync)"
        CLI = "cli", "manage.py"
        SYSTEM = "system"

    kind = models.CharField(max_length=64)
    name = models.CharField(max_length=253)
    uid = models.UUIDField(null=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    actor = models.CharField(max_length=254, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    diff = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["kind", "name", "-at"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} {self.action} by {self.actor or self.source}"


class MovesByState:
    """Rows whose ``state`` moves by conditional updates: two workers never both act."""

    def move(self, old: str | tuple[str, ...], new: str, **fields: Any) -> bool:
        """Conditional state change: True only for the one caller that made it."""
        olds = (old,) if isinstance(old, str) else old
        updated = type(self).objects.filter(pk=self.pk, state__in=olds).update(state=new, **fields)  # type: ignore[attr-defined]
        if updated == 1:
            self.state = new
            for key, value in fields.items():
                setattr(self, key, value)
        return updated == 1


class NodeClaim(MovesByState, models.Model):
    """karpenter.sh/v1 NodeClaim: the request for one node, from decision to termination.

    States move with conditional updates (``filter(state=old).update(state=new)``), so two
    workers never both launch or terminate one claim.
    """

    class State(models.TextChoices):
        PENDING = "pending"  # decided, not yet launched
        LAUNCHING = "launching"  # a worker is calling the cloud
        LAUNCHED = "launched"  # the instance exists
        REGISTERED = "registered"  # its Node joined the cluster
        INITIALIZED = "initialized"  # Ready: startup taints gone, resources reported
        DELETING = "deleting"
        TERMINATED = "terminated"
        FAILED = "failed"

    ACTIVE_STATES = (State.PENDING, State.LAUNCHING, State.LAUNCHED, State.REGISTERED, State.INITIALIZED)

    name = models.CharField(max_length=253, unique=True)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    nodepool_name = models.CharField(max_length=253, db_index=True)
    nodeclass_name = models.CharField(max_length=253, db_index=True)
    # The NodeClaim spec as Karpenter writes it: requirements, resources.requests, taints,
    # startupTaints, expireAfter, nodeClassRef.
    spec = LargeJSONField(default=dict)
    # Offerings to try, cheapest first: [{"instanceType", "zone", "capacityType", "price"}].
    launch_options = LargeJSONField(default=list, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    reason = models.CharField(max_length=64, blank=True)  # e.g. InsufficientCapacity, Unauthorized
    message = models.TextField(blank=True)
    instance_id = models.CharField(max_length=32, blank=True, db_index=True)
    instance_type = models.CharField(max_length=64, blank=True)
    zone = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(max_length=16, blank=True, db_index=True)
    # What it costs: the effective price, after NodeOverlays (a Savings Plan, a licence), of the
    # offering it launched as; and that offering's list price before them (null: not known, the
    # claim predates overlays; the list price is then the effective one).
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    list_price_per_hour = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    launch_attempts = models.PositiveIntegerField(default=0)
    # The token of the batch launched with one fleet with it (the fleet's ClientToken), while
    # it is in one: a retried or relaunched batch finds its claims and its instances by it.
    launch_batch = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    launch_started_at = models.DateTimeField(null=True, blank=True)  # a worker began the cloud call
    launched_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    initialized_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Why it exists: the provisioning batch that planned it, or the disruption it replaces.
    decision = models.ForeignKey("Decision", null=True, blank=True, on_delete=models.SET_NULL, related_name="claims")
    disruption = models.ForeignKey(
        "Disruption", null=True, blank=True, on_delete=models.SET_NULL, related_name="replacements"
    )
    pods = LargeJSONField(default=list, blank=True)  # "ns/name" the plan put on it
    why = models.TextField(blank=True)  # why its instance type won
    alternatives = LargeJSONField(default=list, blank=True)  # the next options with prices

    class Meta:
        ordering = ["-created_at", "name"]

    def __str__(self) -> str:
        return self.name

    def to_manifest(self) -> dict[str, Any]:
        """The karpenter.sh/v1 NodeClaim object created in a real cluster, so kubectl shows
        what was decided."""
        spec = {k: v for k, v in self.spec.items() if k not in ("driftHashes", "overlayCapacity")}
        hashes = self.spec.get("driftHashes") or {}
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": self.name,
                "labels": {"karpenter.sh/nodepool": self.nodepool_name},
                "annotations": {
                    "karpenter.sh/nodepool-hash": hashes.get("nodepool", ""),
                    "karpenter.k8s.aws/ec2nodeclass-hash": hashes.get("nodeclass", ""),
                },
            },
            "spec": spec,
        }

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.instance_id}" if self.instance_id else ""

    def with_overlay_capacity(self, instance_type: Any) -> Any:
        """``instance_type`` (the catalog's) with the extended resources NodeOverlays added to it
        when this claim was planned."""
        import dataclasses

        from provisioning.scheduling.quantity import to_int

        extra = (self.spec.get("overlayCapacity") or {}).get(instance_type.name) or {}
        if not extra:
            return instance_type
        added = {resource: to_int(resource, amount) for resource, amount in extra.items()}
        return dataclasses.replace(instance_type, capacity={**instance_type.capacity, **added})

    @property
    def capacity_reservation_id(self) -> str:
        """The capacity reservation its instance runs in ("" when none)."""
        return self.node_labels().get("karpenter.k8s.aws/capacity-reservation-id", "")

    def node_labels(self) -> dict[str, str]:
        """The labels its node registers with: its single-valued requirements and its labels."""
        labels = {
            r["key"]: r["values"][0]
            for r in self.spec.get("requirements") or []
            if r.get("operator") == "In" and len(r.get("values") or []) == 1
        }
        labels.update(self.spec.get("labels") or {})
        return labels


class ClusterPod(models.Model):
    """A pod as the pipeline knows it: the simulated cluster's own pods, or a mirror of the
    real cluster's (watched). ``manifest`` is the pod as the API returns it."""

    class Phase(models.TextChoices):
        PENDING = "Pending"
        RUNNING = "Running"
        SUCCEEDED = "Succeeded"  # finished: it holds nothing, and nothing waits for it
        FAILED = "Failed"

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    manifest = models.JSONField(default=dict)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING, db_index=True)
    node_name = models.CharField(max_length=253, blank=True, db_index=True)
    # The NodeClaim planned for it while that claim is in flight (upstream's nomination).
    nominated = models.CharField(max_length=253, blank=True, db_index=True)
    unschedulable_reason = models.TextField(blank=True)
    owner = models.CharField(max_length=253, blank=True, db_index=True)  # "Deployment/web" (simulated workloads)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    bound_at = models.DateTimeField(null=True, blank=True)
    # Effective requests, kept as columns so a node's requested cpu and memory is one SUM.
    cpu_millis = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="cluster_pod_unique_name")]
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def request_columns(manifest: Any) -> dict[str, int]:
        """The cpu and memory columns for a pod manifest (zero where it cannot be read: the
        solver reports such a pod with its error; the columns only feed usage bars)."""
        from provisioning.scheduling.manifestfields import PodError
        from provisioning.scheduling.podspec import pod_from_manifest

        try:
            requests = pod_from_manifest(manifest).requests
        except PodError:
            return {"cpu_millis": 0, "memory_bytes": 0}
        return {"cpu_millis": requests.get("cpu", 0), "memory_bytes": requests.get("memory", 0)}


class ClusterNode(models.Model):
    """A node of the cluster (simulated kubelet's, or mirrored); ``manifest`` as the API has it."""

    name = models.CharField(max_length=253, unique=True)
    manifest = models.JSONField(default=dict)
    nodeclaim = models.CharField(max_length=253, blank=True, db_index=True)
    nodepool = models.CharField(max_length=253, blank=True, db_index=True)
    instance_id = models.CharField(max_length=32, blank=True)
    ready = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When a pod last landed on or left it: consolidateAfter counts from here.
    last_pod_change_at = models.DateTimeField(null=True, blank=True)
    disruption_note = models.TextField(blank=True)  # why it is (not) a disruption candidate now

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Decision(models.Model):
    """One provisioning run: the pods it saw, the NodeClaims it planned, the pods it could not
    place with their reasons, and how long each step took."""

    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    pods = models.JSONField(default=list)  # "ns/name" of every pending pod considered
    unschedulable = models.JSONField(default=list)  # [{"pod", "reason"}]
    timings = models.JSONField(default=dict)  # {"window": s, "snapshot": s, "solve": s, "record": s}
    catalog_version = models.CharField(max_length=128, blank=True)
    total_price_per_hour = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    notes = models.JSONField(default=list, blank=True)
    # Offerings the run could not use (insufficient capacity marks): {"spot:m5.large:us-east-1a": reason}
    unavailable = models.JSONField(default=dict, blank=True)
    # What THE verifier refused in the plan (those NodeClaims were not launched):
    # [{"kind", "nodeClaim", "pod", "message"}]
    violations = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"decision {self.pk} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class Disruption(MovesByState, models.Model):
    """One disruption command and its steps: planned, validated 15 s later, replacements
    launched, nodes drained and terminated."""

    class State(models.TextChoices):
        PLANNED = "planned"
        REPLACING = "replacing"  # waiting for replacements to initialize
        DRAINING = "draining"
        DONE = "done"
        CANCELLED = "cancelled"  # no longer valid when re-checked

    reason = models.CharField(max_length=32)  # Empty, Drifted, Underutilized, Expired
    # The planner's method that found it (emptiness, drift, ..., repacking; empty for expiration
    # and forced disruptions): its re-check asks that method again.
    method = models.CharField(max_length=32, blank=True, default="")
    nodes = models.JSONField(default=list)  # node names
    nodeclaims = models.JSONField(default=list)
    replacement_plan = models.JSONField(default=list)  # [{"instanceType", "capacityType", "price", "pods"}]
    savings_per_hour = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    explanation = models.TextField(blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PLANNED, db_index=True)
    message = models.TextField(blank=True)
    # The round's clock, which the re-check 15 s later is measured against.
    planned_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When its nodes began to drain: the terminationGracePeriod counts from here, as upstream
    # counts it from the NodeClaim's deletion (after the re-check and the replacements).
    drain_started_at = models.DateTimeField(null=True, blank=True)
    # When its nodes were tainted and its replacements created (upstream's command
    # CreationTimestamp, set as the orchestration queue takes it): the wait for the
    # replacements times out from here.
    started_at = models.DateTimeField(null=True, blank=True)
    # Forceful termination (a broken instance, node repair): from this moment nothing waits
    # for a PodDisruptionBudget or do-not-disrupt, as upstream's termination-timestamp
    # annotation says; otherwise the terminationGracePeriod sets that moment.
    terminate_by = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Per NodeClaim, the reschedulable pods on its node when its drain began (DaemonSet and
    # mirror pods left out): upstream's karpenter_pods_disruption_initiated_total counts them.
    pods_displaced = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-planned_at", "-id"]

    def __str__(self) -> str:
        return f"{self.reason} {', '.join(self.nodes)}"


class Interruption(models.Model):
    """One message of the interruption queue, one unhealthy instance from DescribeInstanceStatus,
    or one node found unhealthy by node repair: what it said, which node it concerned, what was
    done. Kept (never deleted), so the metrics counted from these rows only ever grow."""

    class Source(models.TextChoices):
        QUEUE = "queue", "interruption queue"
        INSTANCE_STATUS = "instance-status", "DescribeInstanceStatus"
        NODE_REPAIR = "node-repair", "node repair"

    source = models.CharField(max_length=16, choices=Source.choices, default=Source.QUEUE)
    # Upstream's message kinds (spot_interrupted, scheduled_change, instance_stopped, ...,
    # instance_status, system_status, event_status, unhealthy), or "unparsable".
    kind = models.CharField(max_length=40, db_index=True)
    message_id = models.CharField(max_length=128, blank=True)  # the event's id
    summary = models.CharField(max_length=300, blank=True)
    event_time = models.DateTimeField(null=True, blank=True)  # when it happened, as the event says
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    instance_id = models.CharField(max_length=32, blank=True, db_index=True)
    node = models.CharField(max_length=253, blank=True)
    nodeclaim = models.CharField(max_length=253, blank=True)
    nodepool = models.CharField(max_length=253, blank=True)
    capacity_type = models.CharField(max_length=16, blank=True)
    action = models.TextField(blank=True)  # what was done, in a sentence
    disruption = models.ForeignKey(
        Disruption, null=True, blank=True, on_delete=models.SET_NULL, related_name="interruptions"
    )
    pods = models.JSONField(default=list, blank=True)  # "ns/name" of the pods on the node then
    detail = models.JSONField(default=dict, blank=True)  # the event's detail, the condition, ...
    deleted = models.BooleanField(default=False)  # the queue message was deleted
    deliveries = models.PositiveIntegerField(default=1)  # how often the queue delivered it (redeliveries)

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.instance_id or self.node}".strip()


class ClusterPDB(models.Model):
    """A policy/v1 PodDisruptionBudget of the simulated cluster (``manage.py sim apply``):
    ``manifest`` as applied; its status is computed from the pods whenever it is read."""

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    manifest = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="cluster_pdb_unique_name")]
        ordering = ["namespace", "name"]
        verbose_name = "PodDisruptionBudget"

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class AllocationBucket(models.Model):
    """One bucket of the allocation record (``services/allocation.py``) at one of the
    resolutions the spend page charts with: how many of its seconds were sampled so far."""

    resolution = models.PositiveIntegerField()  # its length in seconds
    start = models.DateTimeField()
    seconds = models.FloatField(default=0.0)  # sampled so far: averages divide by this
    sampled_at = models.DateTimeField()  # the last sample that added to it

    class Meta:
        constraints = [models.UniqueConstraint(fields=["resolution", "start"], name="allocation_bucket_unique")]

    def __str__(self) -> str:
        return f"{self.resolution}s from {self.start:%Y-%m-%d %H:%M}"


class Allocation(models.Model):
    """The dollars of node cost one group was allocated in one bucket: a namespace
    (``by="namespace"``), a value of a pod label (``by="label:team"``), or the capacity no pod
    requested (``by="idle"``)."""

    bucket = models.ForeignKey(AllocationBucket, on_delete=models.CASCADE, related_name="allocations")
    by = models.CharField(max_length=330)
    name = models.CharField(max_length=330)
    cost = models.FloatField(default=0.0)  # dollars over the bucket's sampled seconds

    class Meta:
        constraints = [models.UniqueConstraint(fields=["bucket", "by", "name"], name="allocation_unique")]

    def __str__(self) -> str:
        return f"{self.by} {self.name}: ${self.cost:.4f}"
