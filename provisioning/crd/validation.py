"""THE validator: one entry point for the webhook, REST, forms, models and imports.

``validate(document, old=...)`` defaults a copy of the document as the API server
would, then checks it: apiVersion and kind, metadata, the OpenAPI schema (unknown
fields included), the CEL rules (transition rules when ``old`` is given) and the
runtime rules upstream checks only later. Errors name a field path; warnings are short
sentences naming the offending value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Any

from provisioning.crd import nodeoverlay, nodepool
from provisioning.crd.errors import FieldError, ValidationResult
from provisioning.crd.kinds import KINDS, Kind
from provisioning.crd.metadata import OBJECT_META, validate_metadata
from provisioning.crd.schema import MISSING, Object, Walk, apply_defaults, show
from provisioning.crd.schema import validate as validate_node

TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")
# Kinds whose requirements earn a warning when they name no value any instance type has.
CATALOG_AWARE = (nodepool.KIND, nodeoverlay.KIND)
MAX_ERRORS = 100


def served_kinds() -> str:
    """``NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1) or NodeOverlay (...)``."""
    names = [f"{k.kind} ({k.api_version})" for k in KINDS.values()]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def kind_of(document: Any) -> Kind | None:
    if isinstance(document, dict):
        return KINDS.get(document.get("kind"))  # type: ignore[arg-type]
    return None


def default(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` with the CRD defaults filled in."""
    out = _tree_copy(document)
    kind = kind_of(out)
    if kind is not None and isinstance(out.get("spec"), dict):
        apply_defaults(kind.spec, out["spec"])
    elif kind is not None and "spec" not in out and kind.spec_required is False:
        pass  # an EC2NodeClass without spec stays without spec, as upstream
    return out


def _tree_copy(value: Any) -> Any:
    """A copy of a document's mappings and lists (its scalars are immutable): what
    ``copy.deepcopy`` gives for a parsed manifest, in a third of the time (it is on the
    webhook's path)."""
    if isinstance(value, dict):
        return {key: _tree_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tree_copy(item) for item in value]
    return value


def validate(
    document: Any,
    old: dict[str, Any] | None = None,
    *,
    nodeclass_exists: Callable[[str], bool] | None = None,
    catalog_labels: Mapping[str, Set[str]] | None = None,
) -> ValidationResult:
    """Check one document (a dict from YAML or JSON); ``old`` for UPDATE.

    ``nodeclass_exists`` answers whether an EC2NodeClass of that name is known; a
    NodePool pointing at an unknown one earns a warning, since apply order must not
    matter. ``catalog_labels`` (label key → every value some instance type has) makes a
    NodePool or NodeOverlay requirement that matches no instance type earn a warning with a
    suggestion.
    """
    result = ValidationResult()
    if not isinstance(document, dict):
        result.errors.append(
            FieldError("", f"Invalid value: {show(document)}: a manifest must be an object (a mapping)")
        )
        return result
    kind = _check_type(document, result)
    if kind is None:
        return result
    document = default(document)
    old = default(old) if isinstance(old, dict) else None
    walk = Walk()
    for name in document:
        if name not in TOP_LEVEL:
            walk.error(name, f'unknown field "{name}"; valid fields: {", ".join(TOP_LEVEL)}')
    meta = document.get("metadata")
    if meta is None:
        walk.error("metadata", "Required value")
    else:
        validate_node(OBJECT_META, meta, "metadata", walk)
        validate_metadata(meta, walk)
        result.name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
    spec = document.get("spec")
    if spec is None and kind.spec_required:
        walk.error("spec", "Required value")
    elif spec is not None:
        old_spec = old.get("spec", MISSING) if old else MISSING
        validate_node(kind.spec, spec, "spec", walk, old_spec)
        if isinstance(spec, dict):
            if kind.kind in CATALOG_AWARE and catalog_labels is not None:
                kind.runtime_validate(spec, walk, catalog_labels=catalog_labels)  # type: ignore[call-arg]
            else:
                kind.runtime_validate(spec, walk)
    if kind.kind == "EC2NodeClass" and isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        from provisioning.cloud.reservations import PRICES_ANNOTATION, committed_prices

        _, problem = committed_prices(meta["annotations"])
        if problem:
            walk.error(f"metadata.annotations[{PRICES_ANNOTATION}]", f"Invalid value: {problem}")
    if document.get("status") is not None:
        validate_node(Object(preserve_unknown=True), document["status"], "status", walk)
    if kind.kind == "NodePool" and nodeclass_exists is not None:
        _warn_unknown_nodeclass(document, nodeclass_exists, walk)
    result.errors = _unique(walk.errors)[:MAX_ERRORS]
    if len(walk.errors) > MAX_ERRORS:
        result.errors.append(FieldError("", f"... and {len(walk.errors) - MAX_ERRORS} more errors"))
    result.warnings = list(dict.fromkeys(walk.warnings))
    return result


def _check_type(document: dict[str, Any], result: ValidationResult) -> Kind | None:
    api_version, kind_name = document.get("apiVersion"), document.get("kind")
    kind = KINDS.get(kind_name) if isinstance(kind_name, str) else None
    result.kind = kind_name if isinstance(kind_name, str) else ""
    if kind_name is None:
        result.errors.append(FieldError("kind", f"Required value: expected {served_kinds()}"))
        return None
    if kind is None:
        result.errors.append(FieldError("kind", f"Unsupported value: {show(kind_name)}: expected {served_kinds()}"))
        return None
    if api_version != kind.api_version:
        what = "Required value" if api_version is None else f"Unsupported value: {show(api_version)}"
        result.errors.append(FieldError("apiVersion", f"{what}: {kind.kind} is served as {kind.api_version}"))
        return None
    return kind


def _warn_unknown_nodeclass(document: dict[str, Any], exists: Callable[[str], bool], walk: Walk) -> None:
    try:
        ref = document["spec"]["template"]["spec"]["nodeClassRef"]
    except (KeyError, TypeError):
        return
    if not isinstance(ref, dict) or ref.get("kind") != "EC2NodeClass" or not isinstance(ref.get("name"), str):
        return
    if ref["name"] and not exists(ref["name"]):
        name = ref["name"] if len(ref["name"]) <= 40 else ref["name"][:37] + "..."
        walk.warnings.append(f"EC2NodeClass {name!r} not found; the NodePool is not Ready until it exists")


def _unique(errors: list[FieldError]) -> list[FieldError]:
    return list(dict.fromkeys(errors))
