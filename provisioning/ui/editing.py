"""The steps of changing a policy in the browser, between the editors and the policy
service: judge a submission, show its diff for review, explain a conflict.

Nothing is written here; ``services.policy.apply_manifest`` is the only writer, called by
the apply view with the manifest the person reviewed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse

from provisioning import crd
from provisioning.crd.errors import FieldError
from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS, CustomResource
from provisioning.services.policy import manifest_diff, validate_manifest
from provisioning.ui.forms import (
    ConfirmForm,
    EditorStateForm,
    ManifestForm,
    NodeOverlayEditor,
    NodePoolEditor,
    YamlEditor,
    for_apply,
)

Editor = NodePoolEditor | NodeOverlayEditor | YamlEditor


FORMS = {"NodePool": NodePoolEditor, "NodeOverlay": NodeOverlayEditor}


def editors_for(kind: str) -> tuple[str, ...]:
    """The editors a kind offers, the default first."""
    return ("form", "yaml") if kind in FORMS else ("yaml",)


def make_editor(kind: str, editor: str | None, stored: dict[str, Any] | None, data: Any = None) -> Editor:
    """The editor named, if offered (else the default), on the stored manifest; bound to
    ``data`` when submitted. A new object (nothing stored) is written in YAML: the form
    edits what exists and keeps what it does not show."""
    offered = editors_for(kind) if stored is not None else ("yaml",)
    if (editor if editor in offered else offered[0]) == "form":
        return FORMS[kind](stored, data)
    if data is not None or stored is None:
        return YamlEditor(data=data)
    return YamlEditor.of(stored)


@dataclass
class Check:
    """A submission judged: the manifest it proposes (None if unreadable), whether it may
    go to review, what belongs at the top of the page, and the validator's warnings."""

    manifest: dict[str, Any] | None
    ok: bool
    top_errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check(editor: Editor, kind: str, name: str | None, current: CustomResource | None) -> Check:
    """Validate what the editor proposes with THE validator and place its errors at the
    inputs. ``name`` is None when creating."""
    readable = editor.is_valid()
    manifest = editor.proposed()
    if manifest is None:
        return Check(None, False)
    errors = identity_errors(manifest, kind, name)
    warnings: list[str] = []
    if not any(e.path == "kind" for e in errors):
        result = validate_manifest(manifest, current.to_manifest() if current is not None else None)
        errors += result.errors
        warnings = result.warnings
    top = editor.place_errors(errors)
    return Check(manifest, readable and not errors, top, warnings)


def manifest_name(manifest: dict[str, Any]) -> str:
    """metadata.name, or "" where a broken manifest has none."""
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


def identity_errors(manifest: dict[str, Any], kind: str, name: str | None) -> list[FieldError]:
    """What this page cannot do whatever the validator says: turn one kind into another,
    rename an object (that would leave the old one behind), or create over an existing one."""
    if manifest.get("kind") != kind:
        return [FieldError("kind", f"this page edits a {kind}; keep kind: {kind}")]
    proposed_name = manifest_name(manifest)
    if name is not None and proposed_name != name:
        return [
            FieldError(
                "metadata.name",
                f"the name cannot change here (it is {name!r}); create a new {kind} and delete this one",
            )
        ]
    if name is None and proposed_name and RESOURCE_MODELS[kind].objects.filter(name=proposed_name).exists():
        message = f"{kind} {proposed_name!r} already exists; edit it or choose another name"
        return [FieldError("metadata.name", message)]
    return []


def edit_url(kind: str, name: str | None) -> str:
    if name is None:
        return reverse("provisioning:policy-create", args=[kind])
    return reverse("provisioning:policy-edit", args=[kind, name])


def validate_url(kind: str, name: str | None) -> str:
    if name is None:
        return reverse("provisioning:policy-create-validate", args=[kind])
    return reverse("provisioning:policy-validate", args=[kind, name])


def review_context(
    kind: str,
    manifest: dict[str, Any],
    current: CustomResource | None,
    expected_version: str,
    warnings: list[str],
) -> dict[str, Any]:
    """The review step: the diff from the stored object to what will be stored (defaults
    filled in), the warnings, and the confirmation carrying exactly this manifest."""
    name = manifest_name(manifest)
    before = for_apply(current.to_manifest()) if current is not None else None
    creating = current is None
    return {
        "kind": kind,
        "name": name,
        "creating": creating,
        # Only a forged confirmation has no metadata mapping; it gets its errors, no diff.
        "diff": manifest_diff(before, crd.default(manifest), name)
        if isinstance(manifest.get("metadata"), dict)
        else "",
        "warnings": warnings,
        "confirm": ConfirmForm(
            initial={"manifest": dump_yaml([manifest]), "expected_version": expected_version, "creating": creating}
        ),
        "change": change_forms(kind, manifest, None if creating else name, expected_version),
    }


def change_forms(kind: str, manifest: dict[str, Any], name: str | None, expected_version: str) -> dict[str, Any]:
    """Hidden fields that open ``manifest`` in the YAML editor, to change it further."""
    return {
        "url": edit_url(kind, name),
        "state": EditorStateForm(initial={"editor": "yaml", "expected_version": expected_version}),
        "manifest": ManifestForm(initial={"manifest": dump_yaml([manifest])}),
    }


def conflict_context(kind: str, manifest: dict[str, Any], current: CustomResource | None, message: str) -> dict:
    """A change that lost a race: the message, what is stored now, the person's change as
    a diff against it, and a way to review that change again against the current version."""
    name = manifest_name(manifest)
    now = for_apply(current.to_manifest()) if current is not None else None
    return {
        "kind": kind,
        "name": name,
        "message": message,
        "current": current,
        "current_yaml": dump_yaml([current.to_manifest()]) if current is not None else "",
        "diff": manifest_diff(now, crd.default(manifest), name),
        "change": change_forms(
            kind, manifest, name if current is not None else None, str(current.resource_version) if current else ""
        ),
    }
