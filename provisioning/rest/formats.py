"""Request and response formats: JSON and YAML manifests (as kubectl sends them), and JSON
merge patch. Bodies are read with the manifest size limit, so an oversized request is
refused before it is parsed."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.utils import encoders

from provisioning.crd import ManifestError
from provisioning.crd.manifest import dump_yaml, load_documents


class TooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "RequestEntityTooLarge"


def read_body(stream: Any, meta: dict[str, Any]) -> bytes:
    limit = settings.KARPWEB_MAX_MANIFEST_BYTES
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise TooLarge(f"request body of {declared} bytes is over the limit of {limit} bytes")
    body = stream.read(limit + 1) if stream is not None else b""
    if len(body) > limit:
        raise TooLarge(f"request body is over the limit of {limit} bytes")
    return body


def parse_documents(body: bytes, source: str = "request body") -> list[dict[str, Any]]:
    try:
        return load_documents(body, source=source, max_bytes=settings.KARPWEB_MAX_MANIFEST_BYTES)
    except ManifestError as exc:
        raise ParseError(str(exc)) from None


class _ManifestParser(BaseParser):
    """One manifest, or several (a YAML stream, a JSON list or a ``kind: List``) as a list."""

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        body = read_body(stream, request.META if request is not None else {})
        if not body.strip():
            raise ParseError("the request body is empty; send a manifest")
        if body.lstrip().startswith(b"["):
            documents = parse_documents(b'{"kind": "List", "items": ' + body + b"}")
        else:
            documents = parse_documents(body)
        return documents[0] if len(documents) == 1 else documents


class JSONManifestParser(_ManifestParser):
    media_type = "application/json"


class YAMLManifestParser(_ManifestParser):
    media_type = "application/yaml"


class MergePatchParser(_ManifestParser):
    media_type = "application/merge-patch+json"


class YAMLRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        # Through JSON first: serializers hand over decimals, datetimes, UUIDs and ordered
        # dicts, which JSON's encoder knows and a safe YAML dumper does not.
        plain = json.loads(json.dumps(data, cls=encoders.JSONEncoder))
        return dump_yaml([plain]).encode("utf-8")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
