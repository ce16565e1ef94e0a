"""Editors of a policy: the NodePool and NodeOverlay forms with their row formsets, and the
YAML editor.

Each turns what a person typed into a proposed manifest; none judges it. THE validator
(``services.policy.validate_manifest``) does, and each editor then puts every error next
to the input its field path names (``place_errors``), returning the ones that name none.

The forms edit a copy of the stored manifest, so every field they do not show (template
labels, startupTaints, other limits...) is kept as it is.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from django import forms

from provisioning.crd import nodeoverlay, nodepool
from provisioning.crd.errors import FieldError, ManifestError
from provisioning.crd.manifest import dump_yaml, line_of, load_document

# Fields the server sets; a pasted `kubectl get -o yaml` keeps working without them.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")
NODE_CLASS_GROUP, NODE_CLASS_KIND = "karpenter.k8s.aws", "EC2NodeClass"
LIMITS = ("cpu", "memory", "nodes")


def for_apply(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as a person writes it: no status, no server-set metadata."""
    out = {k: copy.deepcopy(v) for k, v in manifest.items() if k != "status"}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k not in SERVER_METADATA}
    return out


def comma_separated(text: str) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


# ---------------------------------------------------------------- rows


class RowForm(forms.Form):
    """One item of a list in the manifest. Every field is optional here: a row with
    nothing typed in is left out, and what a filled row lacks the validator names."""

    blank_fields: tuple[str, ...] = ()
    # item field in the manifest -> form field, to place an error at ``list[i].field``
    item_fields: dict[str, str] = {}

    def is_blank(self) -> bool:
        return all(not _typed(self[name].data) for name in self.blank_fields)

    def is_removed(self) -> bool:
        return bool(self.cleaned_data.get("DELETE"))

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        raise NotImplementedError


def _typed(value: Any) -> bool:
    if isinstance(value, list):
        return any(_typed(v) for v in value)
    return bool(str(value or "").strip())


class RequirementForm(RowForm):
    key = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "kubernetes.io/arch"}))
    operator = forms.ChoiceField(choices=_choices(nodepool.OPERATORS), initial="In")
    values = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "amd64, arm64"}), help_text="comma separated"
    )
    min_values = forms.IntegerField(required=False, label="minValues")

    blank_fields = ("key", "values", "min_values")
    item_fields = {"key": "key", "operator": "operator", "values": "values", "minValues": "min_values"}

    @classmethod
    def initial_for(cls, item: dict[str, Any]) -> dict[str, Any]:
        return {
            "key": item.get("key", ""),
            "operator": item.get("operator", "In"),
            "values": ", ".join(str(v) for v in item.get("values") or []),
            "min_values": item.get("minValues"),
        }

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        data = self.cleaned_data
        item: dict[str, Any] = {"key": data.get("key", "").strip(), "operator": data.get("operator")}
        values = comma_separated(data.get("values", ""))
        if values:
            item["values"] = values
        if data.get("min_values") is not None:
            item["minValues"] = data["min_values"]
        return item


class BudgetForm(RowForm):
    nodes = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "10%"}))
    schedule = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "@daily"}))
    duration = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "8h"}))
    reasons = forms.MultipleChoiceField(
        required=False, choices=_choices(nodepool.DISRUPTION_REASONS), widget=forms.CheckboxSelectMultiple
    )

    blank_fields = ("nodes", "schedule", "duration", "reasons")
    item_fields = {"nodes": "nodes", "schedule": "schedule", "duration": "duration", "reasons": "reasons"}

    @classmethod
    def initial_for(cls, item: dict[str, Any]) -> dict[str, Any]:
        return {
            "nodes": item.get("nodes", ""),
            "schedule": item.get("schedule", ""),
            "duration": item.get("duration", ""),
            "reasons": list(item.get("reasons") or []),
        }

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        data = self.cleaned_data
        item: dict[str, Any] = {}
        for name in ("nodes", "schedule", "duration"):
            if data.get(name, "").strip():
                item[name] = data[name].strip()
        if data.get("reasons"):
            item["reasons"] = list(data["reasons"])
        return item


class TaintForm(RowForm):
    key = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "nvidia.com/gpu"}))
    value = forms.CharField(required=False)
    effect = forms.ChoiceField(choices=_choices(nodepool.TAINT_EFFECTS), initial="NoSchedule")

    blank_fields = ("key", "value")
    item_fields = {"key": "key", "value": "value", "effect": "effect"}

    @classmethod
    def initial_for(cls, item: dict[str, Any]) -> dict[str, Any]:
        return {"key": item.get("key", ""), "value": item.get("value", ""), "effect": item.get("effect", "NoSchedule")}

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        data = self.cleaned_data
        item: dict[str, Any] = {"key": data.get("key", "").strip(), "effect": data.get("effect")}
        if data.get("value", "").strip():
            item["value"] = data["value"].strip()
        # A taint the form does not fully show (timeAdded) keeps its other fields.
        for base in base_items:
            if isinstance(base, dict) and (base.get("key"), base.get("effect")) == (item["key"], item["effect"]):
                return {**{k: v for k, v in base.items() if k not in ("key", "value", "effect")}, **item}
        return item


# Two blank rows are there to fill in without JavaScript; "Add a row" adds more.
ROW_EXTRA = 2
RequirementFormSet = forms.formset_factory(RequirementForm, extra=ROW_EXTRA, can_delete=True, max_num=100)
BudgetFormSet = forms.formset_factory(BudgetForm, extra=ROW_EXTRA, can_delete=True, max_num=50)
TaintFormSet = forms.formset_factory(TaintForm, extra=ROW_EXTRA, can_delete=True, max_num=50)


# ---------------------------------------------------------------- the NodePool form

POLICY_CHOICES = [
    ("", "default (WhenEmptyOrUnderutilized)"),
    *_choices(nodepool.CONSOLIDATION_POLICIES),
    *[(old, f"{old} (v1beta1 name of {new})") for old, new in nodepool.LEGACY_POLICIES.items()],
]


class NodePoolForm(forms.Form):
    weight = forms.IntegerField(required=False, help_text="1 to 100; higher is tried first")
    node_class = forms.CharField(
        required=False, label="EC2NodeClass", widget=forms.TextInput(attrs={"list": "nodeclass-names"})
    )
    expire_after = forms.CharField(
        required=False, label="expireAfter", widget=forms.TextInput(attrs={"placeholder": "720h"})
    )
    limit_cpu = forms.CharField(required=False, label="cpu", widget=forms.TextInput(attrs={"placeholder": "1000"}))
    limit_memory = forms.CharField(
        required=False, label="memory", widget=forms.TextInput(attrs={"placeholder": "1000Gi"})
    )
    limit_nodes = forms.CharField(required=False, label="nodes", widget=forms.TextInput(attrs={"placeholder": "50"}))
    consolidation_policy = forms.ChoiceField(required=False, choices=POLICY_CHOICES, label="consolidationPolicy")
    consolidate_after = forms.CharField(
        required=False, label="consolidateAfter", widget=forms.TextInput(attrs={"placeholder": "0s"})
    )

    @classmethod
    def initial_for(cls, spec: dict[str, Any]) -> dict[str, Any]:
        template_spec = _template_spec(spec)
        disruption = spec.get("disruption") or {}
        limits = spec.get("limits") or {}
        return {
            "weight": spec.get("weight"),
            "node_class": (template_spec.get("nodeClassRef") or {}).get("name", ""),
            "expire_after": template_spec.get("expireAfter", ""),
            **{f"limit_{name}": str(limits.get(name, "")) for name in LIMITS},
            "consolidation_policy": disruption.get("consolidationPolicy", ""),
            "consolidate_after": disruption.get("consolidateAfter", ""),
        }


def _template_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return ((spec.get("template") or {}).get("spec")) or {}


# Where an error lands: a manifest path (and what lies below it) -> a field of NodePoolForm.
FIELD_PATHS = {
    "spec.weight": "weight",
    "spec.template.spec.nodeClassRef": "node_class",
    "spec.template.spec.expireAfter": "expire_after",
    **{f"spec.limits[{name}]": f"limit_{name}" for name in LIMITS},
    "spec.disruption.consolidationPolicy": "consolidation_policy",
    "spec.disruption.consolidateAfter": "consolidate_after",
}
# A list in the manifest -> the formset of its rows.
ROW_PATHS = {
    "spec.template.spec.requirements": "requirements",
    "spec.disruption.budgets": "budgets",
    "spec.template.spec.taints": "taints",
}
SECTIONS = tuple(ROW_PATHS.values())
ROW_PATH = re.compile(r"^\[(?P<index>\d+)\](?:\.(?P<field>\w+))?")


def _below(path: str, prefix: str) -> str | None:
    """What follows ``prefix`` in ``path`` ("" for the prefix itself), or None."""
    if path == prefix:
        return ""
    if path.startswith(prefix) and path[len(prefix)] in ".[":
        return path[len(prefix) :]
    return None


class NodePoolEditor:
    """The NodePool form and its three row formsets, over the manifest they edit."""

    name = "form"
    partial = "nodepool-form"  # the part of the edit page it renders in

    def __init__(self, base: dict[str, Any], data: Any = None) -> None:
        self.base = for_apply(base)
        spec = self.base.get("spec") or {}
        template_spec = _template_spec(spec)
        self.form = NodePoolForm(data, initial=NodePoolForm.initial_for(spec))
        self.formsets = {
            "requirements": RequirementFormSet(
                data,
                prefix="requirements",
                initial=[RequirementForm.initial_for(i) for i in template_spec.get("requirements") or []],
            ),
            "budgets": BudgetFormSet(
                data,
                prefix="budgets",
                initial=[BudgetForm.initial_for(i) for i in (spec.get("disruption") or {}).get("budgets") or []],
            ),
            "taints": TaintFormSet(
                data, prefix="taints", initial=[TaintForm.initial_for(i) for i in template_spec.get("taints") or []]
            ),
        }
        self.section_errors: dict[str, list[str]] = {section: [] for section in SECTIONS}
        # section -> the row form of each item of the proposed list, in manifest order
        self.rows_in_manifest: dict[str, list[RowForm]] = {section: [] for section in SECTIONS}

    def is_valid(self) -> bool:
        """Whether every input could be read (a number where a number goes); the rules
        are the validator's."""
        # Every one is checked, so each shows its own errors.
        results = [self.form.is_valid(), *(formset.is_valid() for formset in self.formsets.values())]
        return all(results)

    def proposed(self) -> dict[str, Any] | None:
        """The manifest the inputs describe. A field that could not be read (``weight:
        heavy``) keeps its stored value; a row's is left out of its item."""
        self.is_valid()
        manifest = copy.deepcopy(self.base)
        spec = manifest.setdefault("spec", {})
        data = self.form.cleaned_data
        template_spec = spec.setdefault("template", {}).setdefault("spec", {})
        if "weight" in data:
            _put(spec, "weight", data["weight"])
        if "node_class" in data:
            ref = template_spec.setdefault("nodeClassRef", {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND})
            ref["name"] = data["node_class"].strip()
        if "expire_after" in data:
            _put(template_spec, "expireAfter", data["expire_after"].strip())
        limits = spec.get("limits") if isinstance(spec.get("limits"), dict) else {}
        for name in LIMITS:
            if f"limit_{name}" in data:
                _put(limits, name, _quantity(data[f"limit_{name}"], limits.get(name)))
        _put(spec, "limits", limits)
        disruption = spec.setdefault("disruption", {})
        if "consolidation_policy" in data:
            _put(disruption, "consolidationPolicy", data["consolidation_policy"])
        if "consolidate_after" in data:
            _put(disruption, "consolidateAfter", data["consolidate_after"].strip())
        template_spec["requirements"] = self._items("requirements", template_spec.get("requirements"))
        # No budget rows: the default budget (10% of the nodes) applies.
        _put(disruption, "budgets", self._items("budgets", disruption.get("budgets")))
        _put(template_spec, "taints", self._items("taints", template_spec.get("taints")))
        _put(spec, "disruption", disruption)
        return manifest

    def _items(self, section: str, base_items: Any) -> list[dict[str, Any]]:
        base_list = base_items if isinstance(base_items, list) else []
        rows = [row for row in self.formsets[section].forms if not row.is_blank() and not row.is_removed()]
        self.rows_in_manifest[section] = rows
        return [row.to_item(base_list) for row in rows]

    def place_errors(self, errors: list[FieldError]) -> list[FieldError]:
        """Put each error at the input (or row, or section) its path names; returns the
        errors that name none of them, for the top of the page."""
        unplaced = []
        for error in errors:
            if not self._place(error):
                unplaced.append(error)
        return unplaced

    def _place(self, error: FieldError) -> bool:
        for prefix, field in FIELD_PATHS.items():
            if _below(error.path, prefix) is not None:
                self.form.add_error(field, error.message)
                return True
        for prefix, section in ROW_PATHS.items():
            rest = _below(error.path, prefix)
            if rest is None:
                continue
            match = ROW_PATH.match(rest)
            rows = self.rows_in_manifest[section]
            if match is None or int(match["index"]) >= len(rows):
                self.section_errors[section].append(error.message)
                return True
            row = rows[int(match["index"])]
            row.add_error(row.item_fields.get(match["field"] or ""), error.message)
            return True
        return False

    def error_slots(self) -> Iterator[tuple[str, list[str]]]:
        """Every place an error can show, with what it shows now: (element id, messages).
        Live validation replaces each of them, so fixed errors disappear too."""
        for field in self.form:
            yield f"errors-{field.auto_id}", list(field.errors)
        for section, formset in self.formsets.items():
            yield f"errors-{section}", [*formset.non_form_errors(), *self.section_errors[section]]
            for row in formset.forms:
                yield f"errors-{row.prefix}", list(row.non_field_errors())
                for field in row:
                    if field.name != "DELETE":
                        yield f"errors-{field.auto_id}", list(field.errors)


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key``, or leave it out when the input is empty (so the default applies)."""
    if value in (None, "", [], {}):
        mapping.pop(key, None)
    else:
        mapping[key] = value


def _quantity(text: str, stored: Any) -> int | str:
    """A limit as typed: a whole number becomes a number, as in the seed (``cpu: 1000``);
    an unchanged input keeps the stored value exactly, number or string."""
    text = text.strip()
    if stored is not None and text == str(stored):
        return stored
    return int(text) if re.fullmatch(r"[0-9]+", text) else text


# ---------------------------------------------------------------- the NodeOverlay form


class OverlayRequirementForm(RequirementForm):
    """A NodeOverlay's requirement: a NodePool's without minValues."""

    key = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "karpenter.k8s.aws/instance-family"})
    )
    values = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "m7i, c7i, r7i"}), help_text="comma separated"
    )
    min_values = None  # type: ignore[assignment]

    blank_fields = ("key", "values")
    item_fields = {"key": "key", "operator": "operator", "values": "values"}

    @classmethod
    def initial_for(cls, item: dict[str, Any]) -> dict[str, Any]:
        return {
            "key": item.get("key", ""),
            "operator": item.get("operator", "In"),
            "values": ", ".join(str(v) for v in item.get("values") or []),
        }

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        data = self.cleaned_data
        item: dict[str, Any] = {"key": data.get("key", "").strip(), "operator": data.get("operator")}
        values = comma_separated(data.get("values", ""))
        if values:
            item["values"] = values
        return item


class CapacityForm(RowForm):
    """An extended resource the overlay adds to the instance types it matches."""

    resource = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "smarter-devices/fuse"}))
    quantity = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "1"}))

    blank_fields = ("resource", "quantity")
    item_fields = {"": "quantity"}

    @classmethod
    def initial_for(cls, resource: str, quantity: Any) -> dict[str, Any]:
        return {"resource": resource, "quantity": str(quantity)}

    def to_item(self, base_items: list[Any]) -> dict[str, Any]:
        data = self.cleaned_data
        return {"resource": data.get("resource", "").strip(), "quantity": data.get("quantity", "").strip()}


OverlayRequirementFormSet = forms.formset_factory(
    OverlayRequirementForm, extra=ROW_EXTRA, can_delete=True, max_num=nodeoverlay.MAX_REQUIREMENTS
)
CapacityFormSet = forms.formset_factory(CapacityForm, extra=1, can_delete=True, max_num=50)

PRICE_KINDS = [
    ("", "no price change"),
    ("priceAdjustment", "priceAdjustment: change the price (+0.05, -27%)"),
    ("price", "price: replace the price (0.42)"),
]


class NodeOverlayForm(forms.Form):
    weight = forms.IntegerField(required=False, help_text="1 to 10000; where overlays meet, the higher one wins")
    price_kind = forms.ChoiceField(required=False, choices=PRICE_KINDS, label="Price")
    price_value = forms.CharField(
        required=False, label="by / to", widget=forms.TextInput(attrs={"placeholder": "-27%"})
    )

    @classmethod
    def initial_for(cls, spec: dict[str, Any]) -> dict[str, Any]:
        kind = "price" if spec.get("price") is not None else "priceAdjustment" if spec.get("priceAdjustment") else ""
        return {"weight": spec.get("weight"), "price_kind": kind, "price_value": spec.get(kind, "") if kind else ""}


OVERLAY_FIELD_PATHS = {"spec.weight": "weight", "spec.price": "price_value", "spec.priceAdjustment": "price_value"}


class NodeOverlayEditor(NodePoolEditor):
    """The NodeOverlay form: weight, the price change, requirements and extended resources.
    Everything else of the manifest (labels, annotations) is kept."""

    name = "form"
    partial = "nodeoverlay-form"

    def __init__(self, base: dict[str, Any], data: Any = None) -> None:
        self.base = for_apply(base)
        spec = self.base.get("spec") or {}
        self.form = NodeOverlayForm(data, initial=NodeOverlayForm.initial_for(spec))
        capacity = spec.get("capacity") if isinstance(spec.get("capacity"), dict) else {}
        self.formsets = {
            "requirements": OverlayRequirementFormSet(
                data,
                prefix="requirements",
                initial=[OverlayRequirementForm.initial_for(i) for i in spec.get("requirements") or []],
            ),
            "capacity": CapacityFormSet(
                data, prefix="capacity", initial=[CapacityForm.initial_for(k, v) for k, v in capacity.items()]
            ),
        }
        self.section_errors = {section: [] for section in self.formsets}
        self.rows_in_manifest = {section: [] for section in self.formsets}
        self.field_paths = OVERLAY_FIELD_PATHS
        self.row_paths = {"spec.requirements": "requirements"}

    def proposed(self) -> dict[str, Any] | None:
        self.is_valid()
        manifest = copy.deepcopy(self.base)
        spec = manifest.setdefault("spec", {})
        data = self.form.cleaned_data
        if "weight" in data:
            _put(spec, "weight", data["weight"])
        if "price_kind" in data:
            spec.pop("price", None)
            spec.pop("priceAdjustment", None)
            if data["price_kind"]:
                _put(spec, data["price_kind"], data.get("price_value", "").strip())
        spec["requirements"] = self._items("requirements", spec.get("requirements"))
        rows = self._items("capacity", None)
        capacity = {row["resource"]: _quantity(row["quantity"] or "", None) for row in rows}
        rows_of = zip(rows, self.rows_in_manifest["capacity"], strict=True)
        self.capacity_rows = {row["resource"]: form for row, form in rows_of}
        _put(spec, "capacity", capacity)
        return manifest

    def _place(self, error: FieldError) -> bool:
        for prefix, field in self.field_paths.items():
            if _below(error.path, prefix) is not None:
                self.form.add_error(field, error.message)
                return True
        rest = _below(error.path, "spec.capacity")
        if rest is not None:
            match = re.match(r"^\[(?P<key>[^\]]+)\]", rest)
            key = match["key"].strip("'") if match else None
            row = getattr(self, "capacity_rows", {}).get(key) if key is not None else None
            if row is None:
                self.section_errors["capacity"].append(error.message)
            else:
                row.add_error("quantity" if "quantity" in error.message else "resource", error.message)
            return True
        for prefix, section in self.row_paths.items():
            rest = _below(error.path, prefix)
            if rest is None:
                continue
            match = ROW_PATH.match(rest)
            rows = self.rows_in_manifest[section]
            if match is None or int(match["index"]) >= len(rows):
                self.section_errors[section].append(error.message)
                return True
            row = rows[int(match["index"])]
            row.add_error(row.item_fields.get(match["field"] or ""), error.message)
            return True
        return False


# ---------------------------------------------------------------- the YAML editor


class ManifestForm(forms.Form):
    manifest = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 30, "spellcheck": "false", "class": "yaml-input"}),
        label="Manifest (YAML or JSON)",
        help_text="status and server-set metadata (uid, resourceVersion...) are ignored",
    )

    def clean_manifest(self) -> dict[str, Any]:
        try:
            return load_document(self.cleaned_data["manifest"], source="the manifest")
        except ManifestError as exc:
            raise forms.ValidationError(str(exc)) from None


class YamlEditor:
    """The whole manifest as text."""

    name = "yaml"

    def __init__(self, text: str = "", data: Any = None) -> None:
        self.form = ManifestForm(data, initial={"manifest": text})
        self.errors: list[str] = []

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> YamlEditor:
        return cls(dump_yaml([for_apply(manifest)]))

    def is_valid(self) -> bool:
        return self.form.is_valid()

    def proposed(self) -> dict[str, Any] | None:
        return for_apply(self.form.cleaned_data["manifest"]) if self.form.is_valid() else None

    def place_errors(self, errors: list[FieldError]) -> list[FieldError]:
        """All of them belong to the text: listed above it, each with the line its path
        points at."""
        text = self.form["manifest"].value() or ""
        self.errors = [_with_line(text, error) for error in errors]
        return []

    def error_slots(self) -> Iterator[tuple[str, list[str]]]:
        field = self.form["manifest"]
        yield f"errors-{field.auto_id}", [*field.errors, *self.errors]


def _with_line(text: str, error: FieldError) -> str:
    line = line_of(text, error.path) if error.path else None
    return f"line {line}: {error}" if line is not None else str(error)


# ---------------------------------------------------------------- the steps around them


class EditorStateForm(forms.Form):
    """What the page carries from step to step: which editor, and the resourceVersion the
    person read (empty when creating)."""

    editor = forms.ChoiceField(choices=[("form", "form"), ("yaml", "yaml")], widget=forms.HiddenInput)
    expected_version = forms.CharField(required=False, widget=forms.HiddenInput)


class ConfirmForm(forms.Form):
    """The review step's confirmation: the exact manifest reviewed and the version it was
    reviewed against."""

    manifest = forms.CharField(widget=forms.HiddenInput)
    expected_version = forms.CharField(required=False, widget=forms.HiddenInput)
    creating = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def clean_manifest(self) -> dict[str, Any]:
        try:
            return load_document(self.cleaned_data["manifest"], source="the reviewed manifest")
        except ManifestError as exc:
            raise forms.ValidationError(str(exc)) from None


class DeleteForm(forms.Form):
    """Deleting is checked against the version the person saw, like any other change."""

    expected_version = forms.CharField(widget=forms.HiddenInput)


class ReplicasForm(forms.Form):
    """A static NodePool's replicas (what ``kubectl scale`` sets), checked against the version
    the person saw, like any other change."""

    replicas = forms.IntegerField(min_value=0, label="Replicas")
    expected_version = forms.CharField(widget=forms.HiddenInput)
