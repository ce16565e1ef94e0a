"""``nodepools/``, ``ec2nodeclasses/`` and ``nodeoverlays/``: the manifests themselves, as kubectl
sees them.

Create (POST), read, replace (PUT), JSON merge patch (PATCH) and delete, through the
policy service, so the validator, the audit trail and optimistic concurrency are the same
as for the browser and the cluster sync. A write to an existing object names the version it
read, as ``metadata.resourceVersion`` or an ``If-Match`` ETag: without one it is refused
(428), a stale one is a 409 carrying the current object, and ``If-Match: *`` says on purpose
that any version will do. ``?dryRun=All`` validates and answers without saving. Warnings go
in ``Warning`` headers, as the Kubernetes API server sends them.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError, UnsupportedMediaType
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from provisioning.models import RESOURCE_MODELS, AuditEntry, CustomResource
from provisioning.rest import errors
from provisioning.rest.formats import merge_patch
from provisioning.rest.schema import ERRORS, MANIFEST, SCALE, STATUS
from provisioning.services import policy

DRY_RUN = OpenApiParameter(
    "dryRun", str, enum=["All"], description="All: validate and answer as if saved, without saving"
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description='the ETag (quoted resourceVersion, e.g. "7") of the version the change is based on; '
    "needed unless the body names metadata.resourceVersion; * writes over any version",
)
ANY_VERSION = "*"


class PreconditionRequired(APIException):
    status_code = 428
    default_code = "precondition_required"
    default_detail = (
        "name the version you read: metadata.resourceVersion in the body, or an If-Match header "
        'with the ETag of your GET (e.g. If-Match: "7"); If-Match: * writes over any version'
    )


class ByName(CursorPagination):
    ordering = "name"
    page_size = 100
    max_page_size = 500
    page_size_query_param = "limit"


def _etag(obj: CustomResource) -> str:
    return f'"{obj.resource_version}"'


def warning_header(warnings: list[str]) -> dict[str, str]:
    """RFC 7234 warn-code 299 with a quoted text, one per warning, comma-joined."""
    if not warnings:
        return {}
    quoted = ['299 - "' + w.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"' for w in warnings]
    return {"Warning": ", ".join(quoted)}


def _dry_run(request: Request) -> bool:
    value = request.query_params.get("dryRun")
    if value not in (None, "All"):
        raise ParseError(f"dryRun={value!r}: the only supported value is All")
    return value == "All"


def _expected_version(request: Request, document: dict[str, Any]) -> str | None:
    """The version the writer read: metadata.resourceVersion, else If-Match; None for
    ``If-Match: *`` (any version, said on purpose). Without either: 428."""
    version = (document.get("metadata") or {}).get("resourceVersion") if isinstance(document, dict) else None
    if version not in (None, ""):
        return str(version)
    header = request.headers.get("If-Match", "").strip()
    if header == ANY_VERSION:
        return None
    if header:
        return header.removeprefix("W/").strip('"')
    raise PreconditionRequired()


def _merge_patch(request: Request, obj: Any) -> tuple[dict[str, Any], str]:
    """A PATCH's merge patch and the version it applies to. The patch applies to the version
    read here, which must be the one the caller names; with If-Match: * it is still the one
    the write must find (no lost update between)."""
    patch = _one_document(request.data)
    if request.content_type.startswith("application/json-patch+json"):
        raise UnsupportedMediaType(request.content_type, "JSON patch is not supported; send a merge patch")
    return patch, _expected_version(request, patch) or str(obj.resource_version)


def _one_document(data: Any) -> dict[str, Any]:
    if isinstance(data, list):
        raise ParseError(f"expected one manifest, found {len(data)}; send them one request each")
    if not isinstance(data, dict):
        raise ParseError("expected a manifest object with apiVersion, kind, metadata and spec")
    return data


def _conflict(exc: policy.Conflict) -> Response:
    reason = "AlreadyExists" if isinstance(exc, policy.AlreadyExists) else "Conflict"
    body = errors.status_body(409, str(exc), reason=reason)
    if exc.current is not None:
        body["details"] = {
            "kind": exc.current.crd_kind.kind,
            "name": exc.current.name,
            "current": exc.current.to_manifest(),
        }
    return Response(body, status=409)


def _applied(applied: policy.Applied, created: bool) -> Response:
    headers = warning_header(applied.warnings)
    if applied.obj is not None and not applied.dry_run:
        headers["ETag"] = _etag(applied.obj)
    return Response(
        applied.manifest,
        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        headers=headers,
    )


class _PolicyView(APIView):
    kind: str = ""  # NodePool | EC2NodeClass | NodeOverlay, set by views_for

    @property
    def model(self) -> type[CustomResource]:
        return RESOURCE_MODELS[self.kind]

    def _check_kind(self, document: dict[str, Any]) -> None:
        sent = document.get("kind")
        if sent is not None and sent != self.kind:
            raise ParseError(f"kind: this endpoint takes {self.kind}, not {sent!r}")

    def _write(self, request: Request, document: dict[str, Any], *, create: bool, expected: str | None) -> Response:
        self._check_kind(document)
        try:
            applied = policy.apply_manifest(
                document,
                source=AuditEntry.Source.REST,
                actor=request.user.get_username(),
                expected_version=expected,
                dry_run=_dry_run(request),
                create_only=create,
            )
        except policy.Invalid as exc:
            return errors.invalid(exc.result)
        except policy.Conflict as exc:
            return _conflict(exc)
        return _applied(applied, created=create)


class PolicyList(_PolicyView):
    @extend_schema(
        summary="List",
        parameters=[OpenApiParameter("limit", int, description="page size, at most 500")],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        paginator = ByName()
        page = paginator.paginate_queryset(self.model.objects.all(), request, view=self)
        return paginator.get_paginated_response([obj.to_manifest() for obj in page])

    @extend_schema(
        summary="Create",
        request=MANIFEST,
        parameters=[DRY_RUN],
        responses={201: MANIFEST, 409: STATUS, 422: STATUS, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        document = _one_document(request.data)
        return self._write(request, document, create=True, expected=None)


class PolicyDetail(_PolicyView):
    def _get(self, name: str) -> CustomResource:
        obj = self.model.objects.filter(name=name).first()
        if obj is None:
            raise NotFound(f"{self.kind} {name!r} not found")
        return obj

    def _same_name(self, document: dict[str, Any], name: str) -> dict[str, Any]:
        meta = document.get("metadata")
        sent = meta.get("name") if isinstance(meta, dict) else None
        if sent is not None and sent != name:
            raise ParseError(f"metadata.name {sent!r} does not match the name in the URL {name!r}")
        return {**document, "metadata": {**(meta if isinstance(meta, dict) else {}), "name": name}}

    @extend_schema(summary="Read", responses={200: MANIFEST, 404: STATUS, **ERRORS})
    def get(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        return Response(obj.to_manifest(), headers={"ETag": _etag(obj)})

    @extend_schema(
        summary="Replace",
        request=MANIFEST,
        parameters=[DRY_RUN, IF_MATCH],
        responses={200: MANIFEST, 404: STATUS, 409: STATUS, 422: STATUS, 428: STATUS, **ERRORS},
    )
    def put(self, request: Request, name: str) -> Response:
        self._get(name)  # a replace does not create, as for custom resources in Kubernetes
        document = self._same_name(_one_document(request.data), name)
        return self._write(request, document, create=False, expected=_expected_version(request, document))

    @extend_schema(
        summary="Merge patch",
        description="RFC 7386 JSON merge patch (Content-Type application/merge-patch+json; "
        "application/json and application/yaml are read as merge patches too).",
        request=OpenApiTypes.OBJECT,
        parameters=[DRY_RUN, IF_MATCH],
        responses={200: MANIFEST, 404: STATUS, 409: STATUS, 422: STATUS, 428: STATUS, **ERRORS},
    )
    def patch(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        patch, expected = _merge_patch(request, obj)
        current = obj.to_manifest()
        current.pop("status", None)
        merged = self._same_name(merge_patch(current, patch), name)
        return self._write(request, merged, create=False, expected=expected)

    @extend_schema(
        summary="Delete",
        parameters=[DRY_RUN, IF_MATCH],
        responses={200: STATUS, 404: STATUS, 409: STATUS, 428: STATUS, **ERRORS},
    )
    def delete(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        expected = _expected_version(request, {})
        warnings = policy.deletion_warnings(self.kind, name)
        if _dry_run(request):
            if expected is not None and expected != str(obj.resource_version):
                return _conflict(policy.Conflict(obj, f"{self.kind} {name!r} has been modified"))
            body = errors.status_body(200, f"{self.kind} {name!r} would be deleted")
            return Response(body, headers=warning_header(warnings))
        try:
            policy.delete_resource(
                self.kind,
                name,
                source=AuditEntry.Source.REST,
                actor=request.user.get_username(),
                expected_version=expected,
            )
        except policy.NotFound as exc:
            raise NotFound(str(exc)) from None
        except policy.Conflict as exc:
            return _conflict(exc)
        body = errors.status_body(200, f"{self.kind} {name!r} deleted", kind=self.kind, name=name)
        return Response(body, headers=warning_header(warnings))


def views_for(kind: str, plural: str, example: str) -> tuple[type[PolicyList], type[PolicyDetail]]:
    """The collection and item views of one kind, with operation ids and a tag of their own
    in the OpenAPI document, and an example name (the seed's) for the path."""
    name = OpenApiParameter("name", str, OpenApiParameter.PATH, examples=[OpenApiExample("seed", value=example)])
    ids = {"get": "list", "post": "create"}
    collection = extend_schema_view(
        **{m: extend_schema(operation_id=f"{plural}_{op}", tags=[plural]) for m, op in ids.items()}
    )(type(f"{kind}List", (PolicyList,), {"kind": kind}))
    ids = {"get": "read", "put": "replace", "patch": "patch", "delete": "delete"}
    item = extend_schema_view(
        **{m: extend_schema(operation_id=f"{plural}_{op}", tags=[plural], parameters=[name]) for m, op in ids.items()}
    )(type(f"{kind}Detail", (PolicyDetail,), {"kind": kind}))
    return collection, item


NodePoolList, NodePoolDetail = views_for("NodePool", "nodepools", "general")
EC2NodeClassList, EC2NodeClassDetail = views_for("EC2NodeClass", "ec2nodeclasses", "default")
NodeOverlayList, NodeOverlayDetail = views_for("NodeOverlay", "nodeoverlays", "savings-plan")


# ------------------------------------------------------------------ the scale subresource


def scale_of(obj: CustomResource) -> dict[str, Any]:
    """The NodePool's ``autoscaling/v1`` Scale, as the API server builds it from the CRD's scale
    subresource (a NodePool without spec.replicas reads as 0, as the API server reads a missing
    specReplicasPath; setting it then is the static↔dynamic switch the validator refuses)."""
    manifest = obj.to_manifest()
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": obj.name,
            "uid": str(obj.uid),
            "resourceVersion": str(obj.resource_version),
            "creationTimestamp": manifest.get("metadata", {}).get("creationTimestamp"),
        },
        "spec": {"replicas": int(obj.spec.get("replicas") or 0)},
        "status": {"replicas": int((obj.status or {}).get("nodes") or 0)},
    }


def _replicas(scale: dict[str, Any]) -> Any:
    """``spec.replicas`` of a Scale sent in (the validator checks it once it is the NodePool's)."""
    sent = scale.get("kind")
    if sent is not None and sent != "Scale":
        raise ParseError(f"kind: this endpoint takes Scale (autoscaling/v1), not {sent!r}")
    spec = scale.get("spec")
    if not isinstance(spec, dict) or "replicas" not in spec:
        raise ParseError("spec.replicas: required, an integer of at least 0")
    return spec["replicas"]


@extend_schema_view(
    get=extend_schema(operation_id="nodepools_scale_read", tags=["nodepools"]),
    put=extend_schema(operation_id="nodepools_scale_replace", tags=["nodepools"]),
    patch=extend_schema(operation_id="nodepools_scale_patch", tags=["nodepools"]),
)
class NodePoolScale(PolicyDetail):
    """``nodepools/NAME/scale/``: the scale subresource, what ``kubectl scale nodepool NAME
    --replicas=N`` reads and writes. A write names the version it read (the Scale's
    metadata.resourceVersion or If-Match; 428 without, 409 when stale) and goes through the
    validator as any change of the NodePool does."""

    kind = "NodePool"
    http_method_names = ["get", "put", "patch", "head", "options"]

    def _scaled(self, request: Request, obj: CustomResource, replicas: Any, expected: str | None) -> Response:
        document = obj.to_manifest()
        document.pop("status", None)
        document["spec"] = {**document.get("spec", {}), "replicas": replicas}
        response = self._write(request, document, create=False, expected=expected)
        if response.status_code != 200:
            return response
        warnings = {k: v for k, v in response.items() if k == "Warning"}
        if _dry_run(request):  # what the Scale would be; nothing saved
            scale = scale_of(obj)
            scale["spec"]["replicas"] = response.data["spec"]["replicas"]
            return Response(scale, headers=warnings)
        fresh = self._get(obj.name)
        return Response(scale_of(fresh), headers={**warnings, "ETag": _etag(fresh)})

    @extend_schema(summary="Read the scale", responses={200: SCALE, 404: STATUS, **ERRORS})
    def get(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        return Response(scale_of(obj), headers={"ETag": _etag(obj)})

    @extend_schema(
        summary="Replace the scale",
        request=SCALE,
        parameters=[DRY_RUN, IF_MATCH],
        responses={200: SCALE, 404: STATUS, 409: STATUS, 422: STATUS, 428: STATUS, **ERRORS},
    )
    def put(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        scale = self._same_name(_one_document(request.data), name)
        return self._scaled(request, obj, _replicas(scale), _expected_version(request, scale))

    @extend_schema(
        summary="Merge patch the scale",
        description='RFC 7386 JSON merge patch of the Scale, e.g. {"spec": {"replicas": 3}}.',
        request=OpenApiTypes.OBJECT,
        parameters=[DRY_RUN, IF_MATCH],
        responses={200: SCALE, 404: STATUS, 409: STATUS, 422: STATUS, 428: STATUS, **ERRORS},
    )
    def patch(self, request: Request, name: str) -> Response:
        obj = self._get(name)
        patch, expected = _merge_patch(request, obj)
        merged = self._same_name(merge_patch(scale_of(obj), patch), name)
        return self._scaled(request, obj, _replicas(merged), expected)
