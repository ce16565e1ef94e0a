"""``simulate/`` (what-if plans) and ``spend/`` (cost over time): the services behind the
dashboard's What-if and Spend pages, for automation."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from provisioning.rest import errors
from provisioning.rest.policies import warning_header
from provisioning.rest.schema import ERRORS, STATUS
from provisioning.services import spend, whatif
from provisioning.services.catalog import load_catalog
from provisioning.services.simulate import SimulateError, plan_documents, plan_to_json

_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Simulate(APIView):
    post_is_read = True  # plans without writing: a viewer may ask

    @extend_schema(
        summary="What-if plan",
        description="Manifests of the kinds `manage.py simulate` reads (NodePool, EC2NodeClass, NodeOverlay, Pod, "
        "Deployment, StatefulSet, Job, DaemonSet, Node...) as a YAML stream, a JSON list or a `kind: List`. With "
        "`policies=current` (the default) the NodePools, EC2NodeClasses and NodeOverlays in force are added, those "
        "of the input replacing the ones of the same kind and name; with `policies=input` only the input is planned, "
        "as `manage.py simulate` does. The answer is `manage.py simulate --format json`'s; notes come in `Warning` "
        "headers. Nothing is saved or launched.",
        request=OpenApiTypes.OBJECT,
        parameters=[OpenApiParameter("policies", str, enum=["current", "input"])],
        responses={200: OpenApiTypes.OBJECT, 422: STATUS, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        documents = request.data if isinstance(request.data, list) else [request.data]
        source = request.query_params.get("policies", "current")
        if source not in ("current", "input"):
            raise ValidationError({"policies": [f"{source!r} is not one of current, input"]})
        try:
            if source == "current":
                result = whatif.plan_manifests(documents)
                plan, notes = result.plan, result.notes
            else:
                snapshot, solved, notes = plan_documents(documents, catalog=load_catalog(), max_pods=whatif.MAX_PODS)
                plan = plan_to_json(solved, snapshot)
        except SimulateError as exc:
            return _invalid(exc)
        return Response(plan, headers=warning_header(notes))


class SimulateDisruption(APIView):
    post_is_read = True  # plans without writing: a viewer may ask

    @extend_schema(
        summary="What-if disruption, now",
        description="What the disruption round would do now to the cluster (emptiness, drift, expiration, multi- "
        "and single-node consolidation, budgets, do-not-disrupt, PodDisruptionBudgets), and for every node why "
        "it is or is not chosen: `manage.py simulate --disruption --format json`'s answer for the cluster as it "
        "is. Nothing is changed.",
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        from provisioning.services import disruption

        try:
            return Response(disruption.what_if(_instant(request, "now", timezone.now())))
        except SimulateError as exc:  # the cluster as stored does not read: say what, not 500
            return _invalid(exc)

    @extend_schema(
        summary="What-if disruption of a cluster given as documents",
        description="NodePool, EC2NodeClass, Node (with Karpenter's labels and `creationTimestamp`), Pod (bound "
        "with `spec.nodeName`, or pending), workloads, DaemonSet and PodDisruptionBudget documents, as "
        "`manage.py simulate --disruption` reads them; ages are judged at `now` (default: now). The answer is "
        "that command's JSON; notes come in `Warning` headers. Nothing is saved.",
        request=OpenApiTypes.OBJECT,
        parameters=[OpenApiParameter("now", OpenApiTypes.DATETIME)],
        responses={200: OpenApiTypes.OBJECT, 422: STATUS, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        from django.conf import settings

        from provisioning.services.disruptionview import what_if

        documents = request.data if isinstance(request.data, list) else [request.data]
        try:
            result, notes = what_if(
                documents,
                now=_instant(request, "now", timezone.now()),
                spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION,
            )
        except SimulateError as exc:
            return _invalid(exc)
        return Response(result, headers=warning_header(notes))


def _invalid(exc: SimulateError) -> Response:
    """422 as a Kubernetes Status: the problems in ``message``, each field in ``details.causes``."""
    return Response(errors.status_body(422, str(exc), causes=exc.causes), status=422)


def _instant(request: Request, name: str, default: datetime) -> datetime:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = parse_datetime(raw)
    if value is None:
        raise ValidationError({name: [f"{raw!r} is not an ISO 8601 time such as 2026-11-29T12:00:00Z"]})
    if timezone.is_naive(value):
        raise ValidationError({name: [f"{raw!r} has no time zone; add Z or an offset such as +01:00"]})
    return value


def _step(request: Request) -> timedelta:
    raw = request.query_params.get("step", "15m")
    match = _DURATION.match(raw)
    if not match or int(match.group(1)) == 0:
        raise ValidationError({"step": [f"{raw!r} is not a duration such as 60s, 15m, 2h or 1d"]})
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


_SPEND_BUCKET = inline_serializer(
    "SpendBucket",
    {
        "start": serializers.DateTimeField(),
        "end": serializers.DateTimeField(),
        "pricePerHour": serializers.DictField(
            child=serializers.FloatField(), help_text="group → average $/hour over the bucket"
        ),
        "idlePerHour": serializers.FloatField(
            required=False, help_text="by namespace or label only: $/hour of capacity no pod requested"
        ),
    },
)
SPEND_SERIES = inline_serializer(
    "SpendSeries",
    {
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "stepSeconds": serializers.IntegerField(),
        "by": serializers.CharField(),
        "groups": serializers.ListField(child=serializers.CharField()),
        "cost": serializers.FloatField(help_text="dollars of the groups over the range (idle apart)"),
        "idleCost": serializers.FloatField(required=False, help_text="by namespace or label only"),
        "recorded": serializers.BooleanField(
            required=False, help_text="by namespace or label only: whether any allocation was recorded in the range"
        ),
        "buckets": _SPEND_BUCKET.__class__(many=True),
    },
)


class Spend(APIView):
    @extend_schema(
        summary="Spend over time",
        description="Average $/hour in buckets of `step` from `from` to `to` (default: the last 24 hours in "
        "15-minute steps), at the prices paid (after NodeOverlay discounts and reservations): by NodePool or "
        "capacity type from the NodeClaims; or allocated by namespace or by a pod label (`label:team`), each "
        "node's cost split over its pods by the larger of their cpu and memory requests' share of it, with the "
        "capacity no pod requested apart as idle (`idlePerHour`, `idleCost`). Allocation is recorded by the "
        "worker every minute for the label keys of `KARPWEB_SPEND_LABELS`; a range is read from the coarsest "
        "record (1 minute, 15 minutes, 2 hours or 6 hours) no longer than `step` that still reaches back to "
        "`from` (1 minute for 2 days, 15 minutes for 8, 2 hours for 35, 6 hours for 400).",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATETIME),
            OpenApiParameter("to", OpenApiTypes.DATETIME),
            OpenApiParameter("step", str, description="60s, 15m, 2h, 1d ..."),
            OpenApiParameter(
                "by",
                str,
                description="nodepool (the default), capacity_type, namespace, or label:KEY for a recorded pod "
                "label key (KARPWEB_SPEND_LABELS, by default team)",
                pattern=r"^(nodepool|capacity_type|namespace|label:.+)$",
            ),
        ],
        responses={200: SPEND_SERIES, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        now = timezone.now()
        end = _instant(request, "to", now)
        start = _instant(request, "from", end - timedelta(hours=24))
        step = _step(request)
        by = request.query_params.get("by", spend.BY_NODEPOOL)
        try:
            series = spend.series(start, end, step, by, now=now)
        except spend.SpendError as exc:
            raise ValidationError({exc.field: [exc.message]}) from None
        return Response(_series_json(series, step))


def _series_json(series: spend.Series, step: timedelta) -> dict[str, Any]:
    allocated = series.by not in spend.GROUPINGS
    body: dict[str, Any] = {
        "from": series.edges[0].isoformat(),
        "to": series.edges[-1].isoformat(),
        "stepSeconds": int(step.total_seconds()),
        "by": series.by,
        "groups": list(series.groups),
        "cost": round(series.cost(), 6),
    }
    if allocated:
        body["idleCost"] = round(series.idle_cost, 6)
        body["recorded"] = series.idle is not None
    buckets = []
    for i in range(series.buckets):
        bucket = {
            "start": series.edges[i].isoformat(),
            "end": series.edges[i + 1].isoformat(),
            "pricePerHour": {group: round(values[i], 6) for group, values in series.values.items()},
        }
        if allocated:
            bucket["idlePerHour"] = round(series.idle[i], 6) if series.idle else 0.0
        buckets.append(bucket)
    body["buckets"] = buckets
    return body
