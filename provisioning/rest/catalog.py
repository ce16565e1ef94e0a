"""``catalog/instancetypes/``: the instance types, offerings and prices the provisioner
sees, filtered by label requirements the way ``manage.py catalog --require`` filters."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from provisioning.rest.schema import ERRORS
from provisioning.services import catalog as service
from provisioning.services.instancetypes import by_family_and_size, parse_require, select, to_json

# A page of types is a few hundred kilobytes; the whole catalog (well over a thousand types,
# every offering) would be megabytes in one answer.
LIMIT, MAX_LIMIT = 100, 500


class InstanceTypes(APIView):
    @extend_schema(
        summary="Instance types",
        parameters=[
            OpenApiParameter(
                "require",
                str,
                many=True,
                description="label requirement, repeatable, all must hold: KEY=VALUE (KEY=A,B for any of several), "
                "KEY!=VALUE, KEY>N, KEY<N; e.g. karpenter.k8s.aws/instance-category=c,m",
            ),
            OpenApiParameter("limit", int, description=f"types per page, at most {MAX_LIMIT} (default {LIMIT})"),
            OpenApiParameter("offset", int, description="types to skip, as the next link sets it"),
        ],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        try:
            requires = [parse_require(text) for text in request.query_params.getlist("require")]
        except ValueError as exc:
            raise ValidationError({"require": [str(exc)]}) from None
        limit, offset = _bounded(request, "limit", LIMIT, 1, MAX_LIMIT), _bounded(request, "offset", 0, 0, None)
        catalog = service.load_catalog()
        types = sorted(
            select(catalog.instance_types(None, None, service.unavailable_checker()), requires), key=by_family_and_size
        )
        return Response(
            {
                "region": catalog.region,
                "prices": catalog.describe_prices(),
                "count": len(types),
                "next": _page_link(request, offset + limit, limit) if offset + limit < len(types) else None,
                "previous": _page_link(request, max(0, offset - limit), limit) if offset else None,
                "results": [to_json(it) for it in types[offset : offset + limit]],
            }
        )


def _bounded(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: [f"{raw!r} is not a whole number"]}) from None
    if value < low or (high is not None and value > high):
        top = f" to {high}" if high is not None else " or more"
        raise ValidationError({name: [f"{value} is out of range: {low}{top}"]})
    return value


def _page_link(request: Request, offset: int, limit: int) -> str:
    query = request.query_params.copy()
    query["offset"], query["limit"] = str(offset), str(limit)
    return request.build_absolute_uri(request.path + "?" + query.urlencode())
