"""PodDisruptionBudget documents (policy/v1) checked as the API server's validation does
(``ValidatePodDisruptionBudgetSpec``: not both of minAvailable and maxUnavailable, each an
integer ≥ 0 or a percent up to 100%; a valid selector), naming the field.

One reader for every way a budget comes in: ``sim apply`` stores what it returns, the what-ifs
read the cluster's budgets through it, so a budget that would not be accepted is an error
rather than a guess (``minAvailable: "eighty"`` read as 0 would allow every eviction).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from provisioning.scheduling.labelselector import LabelSelector
from provisioning.scheduling.manifestfields import PodError

PDB_KIND = "PodDisruptionBudget"
PDB_API_VERSION = "policy/v1"
UNHEALTHY_POD_EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")
_PERCENT = re.compile(r"[0-9]+%")  # as the API server's IsValidPercent
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


def read_budget(document: dict[str, Any]) -> dict[str, Any]:
    """The budget as it is stored: namespace set, no status or server fields. Raises
    :class:`PodError` naming the document (``PodDisruptionBudget shop/web``) and the field."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise PodError("metadata", "must be an object with a name", PDB_KIND)
    name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
    if not isinstance(name, str) or not name:
        raise PodError("metadata.name", "is required", PDB_KIND)
    if not isinstance(namespace, str):
        raise PodError("metadata.namespace", "must be a string", f"{PDB_KIND} {name}")
    where = f"{PDB_KIND} {namespace}/{name}"

    def invalid(path: str, message: str) -> PodError:
        return PodError(path, message, where)

    api_version = document.get("apiVersion")
    if api_version is not None and api_version != PDB_API_VERSION:
        raise invalid("apiVersion", f"must be {PDB_API_VERSION}, not {api_version!r}")
    spec = document.get("spec")
    if spec is None:
        spec = {}  # the API server takes it: a budget without a selector selects no pod
    if not isinstance(spec, dict):
        raise invalid("spec", f"must be an object with selector and minAvailable or maxUnavailable, not {spec!r}")
    try:
        LabelSelector.from_manifest(spec.get("selector"), "spec.selector")
    except PodError as exc:
        raise exc.in_document(where) from None
    given = [key for key in ("minAvailable", "maxUnavailable") if spec.get(key) is not None]
    if len(given) > 1:
        raise invalid("spec", "minAvailable and maxUnavailable cannot be both set")
    # Neither is valid: the disruption controller then expects no pod and allows no disruption.
    for key in given:
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise invalid(f"spec.{key}", f'must be an integer ≥ 0 or a percent such as "50%", not {value!r}')
        if isinstance(value, int) and value < 0:
            raise invalid(f"spec.{key}", f"must be ≥ 0, not {value}")
        if isinstance(value, str) and (not _PERCENT.fullmatch(value) or int(value[:-1]) > 100):
            raise invalid(f"spec.{key}", f'must be an integer or a percent from "0%" to "100%", not {value!r}')
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in UNHEALTHY_POD_EVICTION_POLICIES:
        choices = " or ".join(UNHEALTHY_POD_EVICTION_POLICIES)
        raise invalid("spec.unhealthyPodEvictionPolicy", f"must be {choices}, not {policy!r}")
    kept = {k: copy.deepcopy(v) for k, v in metadata.items() if k not in _SERVER_METADATA}
    kept["namespace"] = namespace
    return {"apiVersion": PDB_API_VERSION, "kind": PDB_KIND, "metadata": kept, "spec": copy.deepcopy(spec)}
