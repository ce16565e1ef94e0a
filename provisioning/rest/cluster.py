"""Read-only views of the cluster as karpweb sees it: pods, NodeClaims, nodes, decisions
and disruptions, filtered with django-filter, ordered, and paged by cursor. They read
through the same querysets as the dashboard (``services.inventory``)."""

from __future__ import annotations

import django_filters
from django.db.models import Q
from rest_framework import serializers, viewsets
from rest_framework.pagination import CursorPagination

from provisioning.models import ClusterNode, ClusterPod, Decision, Disruption, NodeClaim
from provisioning.services import inventory


def money(source: str) -> serializers.DecimalField:
    """Dollars as JSON numbers with six decimals, as the models keep them."""
    return serializers.DecimalField(source=source, max_digits=12, decimal_places=6, coerce_to_string=False)


class Newest(CursorPagination):
    ordering = "-id"
    page_size = 100
    max_page_size = 1000
    page_size_query_param = "limit"


class ByName(Newest):
    ordering = "name"


# ------------------------------------------------------------------ pods


class PodSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node_name")
    unschedulableReason = serializers.CharField(source="unschedulable_reason")
    requests = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    boundAt = serializers.DateTimeField(source="bound_at")

    class Meta:
        model = ClusterPod
        fields = [
            "namespace",
            "name",
            "uid",
            "phase",
            "node",
            "nominated",
            "unschedulableReason",
            "owner",
            "requests",
            "createdAt",
            "boundAt",
        ]

    def get_requests(self, pod: ClusterPod) -> dict[str, int]:
        return {"cpuMillis": pod.cpu_millis, "memoryBytes": pod.memory_bytes}


class PodFilter(django_filters.FilterSet):
    namespace = django_filters.CharFilter()
    phase = django_filters.ChoiceFilter(choices=ClusterPod.Phase.choices)
    nodepool = django_filters.CharFilter(method="by_nodepool", label="NodePool of its node or nominated claim")
    unschedulable = django_filters.BooleanFilter(method="by_unschedulable")

    class Meta:
        model = ClusterPod
        fields = ["namespace", "phase", "nodepool", "unschedulable"]

    def by_nodepool(self, queryset, name, value):
        return queryset.filter(
            Q(node_name__in=ClusterNode.objects.filter(nodepool=value).values("name"))
            | Q(nominated__in=NodeClaim.objects.filter(nodepool_name=value).values("name"))
        )

    def by_unschedulable(self, queryset, name, value):
        return queryset.exclude(unschedulable_reason="") if value else queryset.filter(unschedulable_reason="")


class PodViewSet(viewsets.ReadOnlyModelViewSet):
    """Pods, pending and bound. ``GET pods/<namespace>/<name>/`` reads one."""

    queryset = ClusterPod.objects.all()
    serializer_class = PodSerializer
    filterset_class = PodFilter
    pagination_class = Newest
    ordering_fields = ["id", "created_at"]
    lookup_value_regex = "[^/]+/[^/]+"
    lookup_field = "key"

    def get_object(self):
        namespace, _, name = self.kwargs["key"].partition("/")
        from django.shortcuts import get_object_or_404

        return get_object_or_404(ClusterPod, namespace=namespace, name=name)


# ------------------------------------------------------------------ nodeclaims


class NodeClaimSerializer(serializers.ModelSerializer):
    nodepool = serializers.CharField(source="nodepool_name")
    nodeclass = serializers.CharField(source="nodeclass_name")
    instanceType = serializers.CharField(source="instance_type")
    capacityType = serializers.CharField(source="capacity_type")
    instanceId = serializers.CharField(source="instance_id")
    providerId = serializers.CharField(source="provider_id")
    pricePerHour = money("price_per_hour")  # effective: after NodeOverlays
    listPricePerHour = money("list_price_per_hour")  # before them; null: not known (the price is the list)
    node = serializers.CharField(source="node_name")
    createdAt = serializers.DateTimeField(source="created_at")
    launchedAt = serializers.DateTimeField(source="launched_at")
    registeredAt = serializers.DateTimeField(source="registered_at")
    initializedAt = serializers.DateTimeField(source="initialized_at")
    deletedAt = serializers.DateTimeField(source="deleted_at")
    launchOptions = serializers.JSONField(source="launch_options")
    capacityReservationId = serializers.SerializerMethodField(
        help_text="The capacity reservation its instance runs in (capacity type reserved); null otherwise."
    )

    class Meta:
        model = NodeClaim
        fields = [
            "name", "uid", "nodepool", "nodeclass", "state", "reason", "message", "instanceType", "zone",
            "capacityType", "capacityReservationId", "instanceId", "providerId", "pricePerHour", "listPricePerHour",
            "node", "createdAt", "launchedAt",
            "registeredAt", "initializedAt", "deletedAt", "decision", "disruption", "pods", "why",
            "alternatives", "launchOptions", "spec",
        ]  # fmt: skip

    def get_capacityReservationId(self, claim: NodeClaim) -> str | None:  # noqa: N802  (DRF's naming)
        return claim.capacity_reservation_id or None


class NodeClaimFilter(django_filters.FilterSet):
    nodepool = django_filters.CharFilter(field_name="nodepool_name")
    state = django_filters.ChoiceFilter(choices=NodeClaim.State.choices)
    capacity_type = django_filters.ChoiceFilter(
        field_name="capacity_type", choices=[("spot", "spot"), ("on-demand", "on-demand"), ("reserved", "reserved")]
    )

    class Meta:
        model = NodeClaim
        fields = ["nodepool", "state", "capacity_type"]


class NodeClaimViewSet(viewsets.ReadOnlyModelViewSet):
    """NodeClaims, live and gone. ``GET nodeclaims/<name>/`` reads one."""

    queryset = NodeClaim.objects.all()
    serializer_class = NodeClaimSerializer
    filterset_class = NodeClaimFilter
    pagination_class = Newest
    ordering_fields = ["id", "created_at", "price_per_hour"]
    lookup_field = "name"


# ------------------------------------------------------------------ nodes


class NodeSerializer(serializers.ModelSerializer):
    instanceId = serializers.CharField(source="instance_id")
    disruptionNote = serializers.CharField(source="disruption_note")
    labels = serializers.SerializerMethodField()
    allocatable = serializers.SerializerMethodField()
    requested = serializers.SerializerMethodField()

    class Meta:
        model = ClusterNode
        fields = [
            "name",
            "nodeclaim",
            "nodepool",
            "instanceId",
            "ready",
            "labels",
            "allocatable",
            "requested",
            "disruptionNote",
        ]

    def get_labels(self, node: ClusterNode) -> dict[str, str]:
        return (node.manifest.get("metadata") or {}).get("labels") or {}

    def get_allocatable(self, node: ClusterNode) -> dict[str, str]:
        return (node.manifest.get("status") or {}).get("allocatable") or {}

    def get_requested(self, node: ClusterNode) -> dict[str, int]:
        used = self.context.get("usage", {}).get(node.name, {})
        return {"pods": used.get("pods", 0), "cpuMillis": used.get("cpu") or 0, "memoryBytes": used.get("memory") or 0}


class NodeFilter(django_filters.FilterSet):
    nodepool = django_filters.CharFilter()
    capacity_type = django_filters.CharFilter(method="by_claim", label="capacity type of its NodeClaim")
    state = django_filters.ChoiceFilter(
        choices=NodeClaim.State.choices, method="by_claim", label="state of its NodeClaim"
    )

    class Meta:
        model = ClusterNode
        fields = ["nodepool", "capacity_type", "state"]

    def by_claim(self, queryset, name, value):
        return queryset.filter(nodeclaim__in=NodeClaim.objects.filter(**{name: value}).values("name"))


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with what their pods request. ``GET nodes/<name>/`` reads one."""

    queryset = ClusterNode.objects.all()
    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    pagination_class = ByName
    ordering_fields = ["name", "created_at"]
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_serializer(self, *args, **kwargs):
        instances = args[0] if args else []
        nodes = instances if isinstance(instances, list | tuple) else [instances]
        kwargs.setdefault("context", self.get_serializer_context())
        kwargs["context"]["usage"] = inventory.usage_by_node([n.name for n in nodes if isinstance(n, ClusterNode)])
        return self.serializer_class(*args, **kwargs)


# ------------------------------------------------------------------ decisions and disruptions


class DecisionClaimSerializer(serializers.ModelSerializer):
    nodepool = serializers.CharField(source="nodepool_name")
    instanceType = serializers.CharField(source="instance_type")
    capacityType = serializers.CharField(source="capacity_type")
    pricePerHour = money("price_per_hour")
    listPricePerHour = money("list_price_per_hour")

    class Meta:
        model = NodeClaim
        fields = [
            "name",
            "nodepool",
            "state",
            "instanceType",
            "capacityType",
            "zone",
            "pricePerHour",
            "listPricePerHour",
            "pods",
            "why",
            "alternatives",
        ]


class DecisionSerializer(serializers.ModelSerializer):
    startedAt = serializers.DateTimeField(source="started_at")
    catalogVersion = serializers.CharField(source="catalog_version")
    totalPricePerHour = money("total_price_per_hour")
    claims = DecisionClaimSerializer(many=True)

    class Meta:
        model = Decision
        fields = [
            "id",
            "startedAt",
            "pods",
            "unschedulable",
            "timings",
            "catalogVersion",
            "totalPricePerHour",
            "notes",
            "unavailable",
            "violations",
            "claims",
        ]


class DecisionFilter(django_filters.FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = Decision
        fields = ["since", "until"]


class DecisionViewSet(viewsets.ReadOnlyModelViewSet):
    """Provisioning decisions with their claims and the reasons for each."""

    queryset = Decision.objects.prefetch_related("claims")
    serializer_class = DecisionSerializer
    filterset_class = DecisionFilter
    pagination_class = Newest
    ordering_fields = ["id", "started_at"]


class DisruptionSerializer(serializers.ModelSerializer):
    replacementPlan = serializers.JSONField(source="replacement_plan")
    savingsPerHour = money("savings_per_hour")
    plannedAt = serializers.DateTimeField(source="planned_at")
    finishedAt = serializers.DateTimeField(source="finished_at")

    class Meta:
        model = Disruption
        fields = [
            "id",
            "reason",
            "method",
            "nodes",
            "nodeclaims",
            "replacementPlan",
            "savingsPerHour",
            "explanation",
            "state",
            "message",
            "plannedAt",
            "finishedAt",
        ]


class DisruptionFilter(django_filters.FilterSet):
    reason = django_filters.CharFilter()
    state = django_filters.ChoiceFilter(choices=Disruption.State.choices)

    class Meta:
        model = Disruption
        fields = ["reason", "state"]


class DisruptionViewSet(viewsets.ReadOnlyModelViewSet):
    """Disruptions (consolidation, drift, expiry) with their reason and savings."""

    queryset = Disruption.objects.all()
    serializer_class = DisruptionSerializer
    filterset_class = DisruptionFilter
    pagination_class = Newest
    ordering_fields = ["id", "planned_at"]
