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
            )
        ],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        try:
            requires = [parse_require(text) for text in request.query_params.getlist("require")]
        except ValueError as exc:
            raise ValidationError({"require": [str(exc)]}) from None
        catalog = service.load_catalog()
        types = sorted(
            select(catalog.instance_types(None, None, service.unavailable_checker()), requires), key=by_family_and_size
        )
        return Response(
            {
                "region": catalog.region,
                "prices": catalog.describe_prices(),
                "count": len(types),
                "results": [to_json(it) for it in types],
            }
        )
