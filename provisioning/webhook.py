"""The validating admission webhook: AdmissionReview in, THE validator, AdmissionReview out.

The API server waits on this with ``failurePolicy: Fail``, so it must always answer,
quickly and well-formed: a malformed body without a usable uid gets a 400 with a JSON
error; anything carrying a string uid gets a 200 AdmissionReview, a deny with a message
when the object is bad. DELETE is always allowed (upstream removed deletion webhooks
after they deadlocked clusters), with a warning when the EC2NodeClass is still in use.

The NodePool's scale subresource (``kubectl scale nodepool X --replicas=N``) is not sent here:
the webhook's rules name ``nodepools``, which does not match the ``nodepools/scale``
subresource, and the API server checks the NodePool a scale produces against the CRD's own
schema and CEL rules (replicas of at least 0; no static↔dynamic switch), the same rules as
THE validator's. Should a configuration list ``nodepools/scale`` anyway, the review carries an
``autoscaling/v1`` Scale, not the NodePool: it is allowed when ``spec.replicas`` is an integer
of at least 0 and denied otherwise; the rest is the CRD's to check.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from provisioning import crd
from provisioning.crd.errors import ManifestError
from provisioning.crd.manifest import check_shape
from provisioning.observability.metrics import WEBHOOK_DURATION
from provisioning.services.policy import deletion_warnings, validate_manifest

log = logging.getLogger(__name__)

REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")  # the only values a latency label takes
MAX_WARNING = 120


class BadReview(Exception):
    """The body is not an AdmissionReview we can answer (no usable uid)."""


@csrf_exempt
def validate(request: HttpRequest) -> HttpResponse:
    started = time.perf_counter()
    labels = ("", "", "error")
    try:
        response, labels = _answer(request)
    finally:
        WEBHOOK_DURATION.labels(*labels).observe(time.perf_counter() - started)
    return response


def _answer(request: HttpRequest) -> tuple[HttpResponse, tuple[str, str, str]]:
    """The reply, and the labels of its latency: kind, operation, result."""
    if request.method != "POST":
        return _error(405, "POST an AdmissionReview (admission.k8s.io/v1) here"), ("", "", "error")
    try:
        review = _read(request)
    except BadReview as exc:
        return _error(400, str(exc)), ("", "", "error")
    req = review["request"]
    try:
        allowed, code, message, warnings = _decide(req)
    except Exception:  # noqa: BLE001 - the API server must get an answer, never a 5xx
        log.exception("webhook: unexpected error for uid %s", req["uid"])
        allowed, code, message, warnings = False, 500, "internal error while validating; see karpweb logs", []
    response: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message, "reason": "Invalid" if code == 422 else "BadRequest"}
    if warnings:
        response["warnings"] = [_short(w) for w in warnings]
    kind = _request_kind(req)
    operation = req.get("operation") if req.get("operation") in OPERATIONS else ""
    labels = (kind.kind if kind else "", operation, "allowed" if allowed else "denied")
    return JsonResponse({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}), labels


def _read(request: HttpRequest) -> dict[str, Any]:
    limit = settings.KARPWEB_MAX_MANIFEST_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise BadReview(f"request body of {length} bytes is over the {limit} byte limit")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise BadReview(f"request body is over the {limit} byte limit")
    try:
        review = json.loads(body)
    except RecursionError:
        raise BadReview("request body is nested too deeply to be an AdmissionReview") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReview(f"request body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview("expected an AdmissionReview object")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") not in REVIEW_VERSIONS:
        raise BadReview(
            f"expected kind AdmissionReview with apiVersion admission.k8s.io/v1, got "
            f"{review.get('kind')!r} {review.get('apiVersion')!r}"
        )
    req = review.get("request")
    if not isinstance(req, dict):
        raise BadReview("AdmissionReview has no request")
    if not isinstance(req.get("uid"), str) or not req["uid"]:
        raise BadReview("AdmissionReview request has no string uid")
    return review


def _decide(req: dict[str, Any]) -> tuple[bool, int, str, list[str]]:
    operation = req.get("operation")
    if _is_scale(req):
        return _decide_scale(req)
    kind = _request_kind(req)
    if kind is None:
        got = req.get("kind")
        label = f"{got.get('kind')} ({got.get('group')}/{got.get('version')})" if isinstance(got, dict) else repr(got)
        return False, 400, f"karpweb validates {crd.validation.served_kinds()}; got {label}", []
    if operation in ("DELETE", "CONNECT"):
        name = req.get("name") or _name(req.get("oldObject"))
        return True, 200, "", deletion_warnings(kind.kind, name) if operation == "DELETE" and name else []
    if operation not in ("CREATE", "UPDATE"):
        return False, 400, f"unsupported operation {operation!r}; expected CREATE, UPDATE or DELETE", []
    obj, old = req.get("object"), req.get("oldObject") if operation == "UPDATE" else None
    if not isinstance(obj, dict):
        return False, 400, f"{operation} request carries no object", []
    if obj.get("kind") != kind.kind or obj.get("apiVersion") != kind.api_version:
        return (
            False,
            400,
            (
                f"object is {obj.get('kind')!r} ({obj.get('apiVersion')!r}) but the request is for "
                f"{kind.kind} ({kind.api_version})"
            ),
            [],
        )
    try:
        check_shape(obj, "object")
        if old is not None:
            check_shape(old, "oldObject")
    except ManifestError as exc:
        return False, 400, str(exc), []
    result = validate_manifest(obj, old if isinstance(old, dict) else None)
    if result.ok:
        return True, 200, "", result.warnings
    return False, 422, _message(kind, result), result.warnings


def _is_scale(req: dict[str, Any]) -> bool:
    """A review of a NodePool's scale subresource: an ``autoscaling/v1`` Scale."""
    gvk, resource = req.get("kind"), req.get("resource")
    return (
        isinstance(gvk, dict)
        and gvk.get("group") == "autoscaling"
        and gvk.get("kind") == "Scale"
        and isinstance(resource, dict)
        and resource.get("group") == crd.NODEPOOL.group
        and resource.get("resource") == crd.NODEPOOL.plural
        and req.get("subResource") == "scale"
    )


def _decide_scale(req: dict[str, Any]) -> tuple[bool, int, str, list[str]]:
    """A Scale of a NodePool (see the module's note): its spec.replicas, an integer >= 0."""
    if req.get("operation") != "UPDATE":
        return True, 200, "", []
    obj = req.get("object")
    spec = obj.get("spec") if isinstance(obj, dict) else None
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 0:
        return True, 200, "", []
    name = req.get("name") or _name(obj)
    message = (
        f'Scale.autoscaling "{name}" is invalid: [spec.replicas: Invalid value: {json.dumps(replicas)}: '
        f"must be an integer of at least 0 (the NodePool's spec.replicas)]"
    )
    return False, 422, message, []


def _request_kind(req: dict[str, Any]) -> crd.Kind | None:
    gvk = req.get("kind")
    if not isinstance(gvk, dict):
        return None
    kind = crd.KINDS.get(gvk.get("kind"))  # type: ignore[arg-type]
    if kind is None or gvk.get("group") != kind.group or gvk.get("version") != kind.version:
        return None
    return kind


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get("name", "") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""


def _message(kind: crd.Kind, result: crd.ValidationResult) -> str:
    """The API server's aggregate style: ``NodePool.karpenter.sh "x" is invalid: [...]``."""
    errors = ", ".join(str(e) for e in result.errors)
    return f'{kind.kind}.{kind.group} "{result.name}" is invalid: [{errors}]'


def _short(warning: str) -> str:
    return warning if len(warning) <= MAX_WARNING else warning[: MAX_WARNING - 3] + "..."


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)
