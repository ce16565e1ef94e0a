"""Every error of the API in one shape, Kubernetes' ``Status``, so a client handles a
validation failure, a conflict, a missing object and a throttled request alike:

    {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 422,
     "reason": "Invalid", "message": "NodePool/general is invalid: ...",
     "details": {"kind": "NodePool", "name": "general",
                 "causes": [{"field": "spec.template.spec.requirements[0].operator", "message": "..."}]}}
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from provisioning.crd import ValidationResult

log = logging.getLogger(__name__)

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    412: "PreconditionFailed",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    428: "PreconditionRequired",
    429: "TooManyRequests",
}


def status_body(
    code: int,
    message: str,
    *,
    reason: str | None = None,
    kind: str = "",
    name: str = "",
    causes: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Success" if code < 400 else "Failure",
        "code": code,
        "reason": reason or REASONS.get(code, "InternalError"),
        "message": message,
    }
    details = {k: v for k, v in (("kind", kind), ("name", name)) if v}
    if causes:
        details["causes"] = causes
    if details:
        body["details"] = details
    return body


def invalid(result: ValidationResult) -> Response:
    return Response(
        status_body(
            422,
            result.summary(),
            kind=result.kind,
            name=result.name,
            causes=[{"field": e.path, "message": e.message} for e in result.errors],
        ),
        status=422,
    )


def _message(detail: Any) -> tuple[str, list[dict[str, str]]]:
    """DRF's error detail (a string, a list or a field → messages mapping) as a message
    and causes."""
    if isinstance(detail, dict):
        causes = [
            {"field": str(field), "message": str(m)}
            for field, messages in detail.items()
            for m in (messages if isinstance(messages, list) else [messages])
        ]
        return "; ".join(f"{c['field']}: {c['message']}" for c in causes), causes
    if isinstance(detail, list):
        return "; ".join(str(d) for d in detail), []
    return str(detail), []


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler (which sets Retry-After on throttling and WWW-Authenticate), with the
    body replaced by a Status."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    response = exception_handler(exc, context)
    if response is None:
        log.exception("api: unexpected error", exc_info=exc)
        return Response(
            status_body(500, "internal error; see karpweb's logs"), status=status.HTTP_500_INTERNAL_SERVER_ERROR
        )
    data = response.data
    message, causes = _message(data.get("detail", data) if isinstance(data, dict) else data)
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        message = f"too many requests; retry in {int(exc.wait) + 1} s"
    response.data = status_body(response.status_code, message, causes=causes)
    return response


def not_found(request, *args, **kwargs):
    from django.http import JsonResponse

    return JsonResponse(status_body(404, f"no API endpoint at {request.path}"), status=404)
