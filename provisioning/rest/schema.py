"""Shapes for the OpenAPI document that are not serializers of models: a manifest, and the
Status every error carries."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

MANIFEST = inline_serializer(
    "Manifest",
    {
        "apiVersion": serializers.CharField(help_text="karpenter.sh/v1 or karpenter.k8s.aws/v1"),
        "kind": serializers.CharField(help_text="NodePool or EC2NodeClass"),
        "metadata": serializers.DictField(help_text="name, labels, annotations; resourceVersion and uid on reads"),
        "spec": serializers.DictField(),
        "status": serializers.DictField(required=False),
    },
)

SCALE = inline_serializer(
    "Scale",
    {
        "apiVersion": serializers.CharField(help_text="autoscaling/v1", required=False),
        "kind": serializers.CharField(help_text="Scale", required=False),
        "metadata": serializers.DictField(
            help_text="name, uid, resourceVersion (name the one you read on a write), creationTimestamp", required=False
        ),
        "spec": inline_serializer(
            "ScaleSpec", {"replicas": serializers.IntegerField(min_value=0, help_text="the NodePool's spec.replicas")}
        ),
        "status": inline_serializer(
            "ScaleStatus",
            {"replicas": serializers.IntegerField(help_text="the NodePool's status.nodes: its NodeClaims now")},
            required=False,
        ),
    },
)

_CAUSE = inline_serializer("StatusCause", {"field": serializers.CharField(), "message": serializers.CharField()})

STATUS = inline_serializer(
    "Status",
    {
        "apiVersion": serializers.CharField(),
        "kind": serializers.CharField(),
        "status": serializers.ChoiceField(["Success", "Failure"]),
        "code": serializers.IntegerField(),
        "reason": serializers.CharField(),
        "message": serializers.CharField(),
        "details": inline_serializer(
            "StatusDetails",
            {
                "kind": serializers.CharField(required=False),
                "name": serializers.CharField(required=False),
                "causes": _CAUSE.__class__(many=True, required=False),
                "current": serializers.DictField(required=False, help_text="on a conflict: the object as it is now"),
            },
            required=False,
        ),
    },
)

# Errors any endpoint can answer with.
ERRORS = {
    400: OpenApiResponse(STATUS, description="the body or a parameter cannot be read"),
    401: OpenApiResponse(STATUS, description="no or bad credentials (Authorization: Token KEY)"),
    403: OpenApiResponse(STATUS, description="the role is not enough"),
    413: OpenApiResponse(STATUS, description="body over the manifest size limit"),
    415: OpenApiResponse(STATUS, description="Content-Type not JSON, YAML or merge patch"),
    429: OpenApiResponse(STATUS, description="throttled; see Retry-After"),
}


def _enums():
    from provisioning.models import ClusterPod, Disruption, NodeClaim

    return NodeClaim.State, Disruption.State, ClusterPod.Phase


# Choice sets named in the document (settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
NODECLAIM_STATES, DISRUPTION_STATES, POD_PHASES = _enums()


def add_common_errors(result, generator, request, public):
    """Every operation can answer with these, whatever its own responses: the document
    says so, so a client (and a contract test) is never surprised."""
    common = {
        "400": "the body or a parameter cannot be read",
        "401": "no or bad credentials (Authorization: Token KEY)",
        "403": "the role is not enough",
        "404": "no such object, or an unknown ?format",
        "406": "no representation for the Accept header",
        "413": "body over the manifest size limit",
        "415": "Content-Type not JSON, YAML or merge patch",
        "429": "throttled; see Retry-After",
    }
    status_ref = {"$ref": "#/components/schemas/Status"}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for code, description in common.items():
                content = {media: {"schema": status_ref} for media in ("application/json", "application/yaml")}
                responses.setdefault(code, {"description": description, "content": content})
            # gunicorn answers a request line over its limit (4094 bytes, `limit_request_line`)
            # itself, in HTML, before Django sees it.
            responses.setdefault(
                "414",
                {
                    "description": "request line over the server's limit (4094 bytes)",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
            )
    return result
