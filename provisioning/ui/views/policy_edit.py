"""Changing policies: edit (form or YAML), create from a starter, revert to a version from
history. Each is validated live, reviewed as a diff, then applied with the resourceVersion
the person reviewed against, so a change made meanwhile by someone else is never
overwritten.

A page that shows the person what to do next (the form with its errors, a conflict with
the version now stored) answers 200: a browser reports every 4xx page in its console as a
failed resource, and these are steps of the editor, not failures. The REST API answers the
same outcomes with 422 and 409."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from provisioning.crd import ValidationResult
from provisioning.models import RESOURCE_MODELS, AuditEntry, CustomResource, EC2NodeClass
from provisioning.services.policy import Conflict, Invalid, apply_manifest, validate_manifest
from provisioning.ui import starters
from provisioning.ui.access import EDITOR, role_required
from provisioning.ui.editing import (
    Check,
    Editor,
    check,
    conflict_context,
    edit_url,
    editors_for,
    make_editor,
    manifest_name,
    review_context,
    validate_url,
)
from provisioning.ui.forms import ConfirmForm, EditorStateForm, YamlEditor, for_apply

EDIT_TEMPLATE = "provisioning/policies/edit.html"
REVIEW_TEMPLATE = "provisioning/policies/review.html"
CONFLICT_TEMPLATE = "provisioning/policies/conflict.html"


def _model(kind: str) -> type[CustomResource]:
    model = RESOURCE_MODELS.get(kind)
    if model is None:
        raise Http404(f"unknown kind {kind!r}")
    return model


def _current(kind: str, name: str | None) -> CustomResource | None:
    """The stored object being edited; None when creating (no name)."""
    if name is None:
        _model(kind)
        return None
    return get_object_or_404(_model(kind), name=name)


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(EDITOR)
def policy_edit(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    current = _current(kind, name)
    if request.method == "POST":
        return _submitted(request, kind, current)
    editor = make_editor(kind, request.GET.get("editor"), current.to_manifest())
    state = EditorStateForm(initial={"editor": editor.name, "expected_version": current.resource_version})
    return render(request, EDIT_TEMPLATE, _context(kind, current, editor, state, None))


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(EDITOR)
def policy_create(request: HttpRequest, kind: str) -> HttpResponse:
    _model(kind)
    if request.method == "POST":
        return _submitted(request, kind, None)
    starter = starters.find(kind, request.GET.get("starter"))
    if starter is None:
        raise Http404("no such starter")
    editor = YamlEditor(starter.text)
    state = EditorStateForm(initial={"editor": editor.name, "expected_version": ""})
    return render(request, EDIT_TEMPLATE, _context(kind, None, editor, state, None))


@require_POST
@role_required(EDITOR)
def policy_validate(request: HttpRequest, kind: str, name: str | None = None) -> HttpResponse:
    """Live validation as the person types: for htmx, the summary plus every field's
    errors swapped out of band (the inputs are left alone, so no keystroke is lost);
    without htmx, the whole page."""
    current = _current(kind, name)
    state = EditorStateForm(request.POST)
    chosen = state.cleaned_data["editor"] if state.is_valid() else None
    editor = make_editor(kind, chosen, _stored_manifest(current), request.POST)
    context = _context(kind, current, editor, state, check(editor, kind, name, current))
    if request.htmx:
        return render(request, EDIT_TEMPLATE + "#validation", {**context, "out_of_band": True})
    return render(request, EDIT_TEMPLATE, context)


def _submitted(request: HttpRequest, kind: str, current: CustomResource | None) -> HttpResponse:
    """A POST of the editor: add a row, show it again, or (``review``) go to the review."""
    state = EditorStateForm(request.POST)
    if not state.is_valid() or (current is not None and not state.cleaned_data["expected_version"]):
        return HttpResponseBadRequest("The page was incomplete (no editor or no version); reload it and try again.")
    name = current.name if current is not None else None
    editor = make_editor(kind, state.cleaned_data["editor"], _stored_manifest(current), _with_added_row(request.POST))
    judged = check(editor, kind, name, current)
    context = _context(kind, current, editor, state, judged)
    if "add_row" in request.POST and request.htmx and editor.name == "form":
        return render(request, f"{EDIT_TEMPLATE}#{editor.partial}", context)
    if "review" not in request.POST:
        return render(request, EDIT_TEMPLATE, context)
    if not judged.ok:
        return render(request, EDIT_TEMPLATE, context)
    expected = state.cleaned_data["expected_version"]
    if current is not None and str(current.resource_version) != expected:
        message = (
            f"{kind} {current.name!r} was changed since you opened it "
            f"(resourceVersion {expected} then, {current.resource_version} now)"
        )
        return render(request, CONFLICT_TEMPLATE, conflict_context(kind, judged.manifest, current, message))
    return render(request, REVIEW_TEMPLATE, review_context(kind, judged.manifest, current, expected, judged.warnings))


@require_POST
@role_required(EDITOR)
def policy_apply(request: HttpRequest) -> HttpResponse:
    """The confirmed change, applied exactly as reviewed."""
    confirm = ConfirmForm(request.POST)
    if not confirm.is_valid():
        return HttpResponseBadRequest("The confirmation was incomplete: " + confirm.errors.as_text())
    manifest = confirm.cleaned_data["manifest"]
    kind = manifest.get("kind")
    if kind not in RESOURCE_MODELS:
        return HttpResponseBadRequest(f"Unknown kind {kind!r}")
    try:
        applied = apply_manifest(
            manifest,
            source=AuditEntry.Source.UI,
            actor=request.user.get_username(),
            expected_version=confirm.cleaned_data["expected_version"] or None,
            create_only=confirm.cleaned_data["creating"],
        )
    except Invalid as exc:
        # Valid at review, invalid now: something it depends on changed meanwhile.
        return _invalid_review(request, kind, manifest, _stored(kind, manifest), exc.result)
    except Conflict as exc:
        return render(request, CONFLICT_TEMPLATE, conflict_context(kind, manifest, exc.current, str(exc)))
    messages.success(request, f"{kind} {applied.obj.name} {applied.action}.")
    return redirect("provisioning:policy-detail", kind, applied.obj.name)


@require_safe
@role_required(EDITOR)
def policy_revert(request: HttpRequest, kind: str, name: str, entry_id: int) -> HttpResponse:
    """Review a return to the version an audit entry recorded: what the change made or,
    for a deletion, what it removed."""
    entry = get_object_or_404(AuditEntry, pk=entry_id, kind=kind, name=name)
    target = entry.after if entry.after is not None else entry.before
    if target is None:
        raise Http404("this entry recorded no version")
    current = _model(kind).objects.filter(name=name).first()
    manifest = for_apply(target)
    result = validate_manifest(manifest, current.to_manifest() if current is not None else None)
    if not result.ok:
        return _invalid_review(request, kind, manifest, current, result, reverting=entry)
    version = str(current.resource_version) if current is not None else ""
    context = review_context(kind, manifest, current, version, result.warnings)
    return render(request, REVIEW_TEMPLATE, {**context, "reverting": entry})


def _invalid_review(
    request: HttpRequest,
    kind: str,
    manifest: dict[str, Any],
    current: CustomResource | None,
    result: ValidationResult,
    **extra: Any,
) -> HttpResponse:
    """The review of a manifest the validator rejects: its errors, no confirmation, and a
    way to fix it in the YAML editor (against the version shown)."""
    version = str(current.resource_version) if current is not None else ""
    context = review_context(kind, manifest, current, version, result.warnings)
    context.update(errors=result.errors, confirm=None, **extra)
    return render(request, REVIEW_TEMPLATE, context)


def _stored(kind: str, manifest: dict[str, Any]) -> CustomResource | None:
    return RESOURCE_MODELS[kind].objects.filter(name=manifest_name(manifest)).first()


def _stored_manifest(current: CustomResource | None) -> dict[str, Any] | None:
    return current.to_manifest() if current is not None else None


def _with_added_row(data: QueryDict) -> QueryDict:
    """The submitted rows plus one blank row in the section "Add a row" names."""
    total = f"{data.get('add_row')}-TOTAL_FORMS"
    if total not in data or not data[total].isdigit():
        return data
    data = data.copy()
    data[total] = str(int(data[total]) + 1)
    return data


def _context(
    kind: str, current: CustomResource | None, editor: Editor, state: EditorStateForm, judged: Check | None
) -> dict[str, Any]:
    name = current.name if current is not None else None
    return {
        "kind": kind,
        "name": name,
        "creating": current is None,
        "editor": editor,
        "state": state,
        "check": judged,
        "action_url": edit_url(kind, name),
        "validate_url": validate_url(kind, name),
        "tabs": [(e, f"{edit_url(kind, name)}?editor={e}") for e in editors_for(kind)] if name else [],
        "nodeclass_names": list(EC2NodeClass.objects.values_list("name", flat=True)) if kind == "NodePool" else [],
    }
