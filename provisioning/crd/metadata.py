"""ObjectMeta of a cluster-scoped custom resource, and checks on it."""

from __future__ import annotations

from typing import Any

from provisioning.crd import labels as L
from provisioning.crd.schema import Array, Integer, Map, Object, String, Walk, key_path, show

# Annotations share the API server's limit of 256 KiB in total.
MAX_ANNOTATIONS_BYTES = 256 * 1024

OBJECT_META = Object(
    properties={
        "name": String(),
        "generateName": String(),
        "namespace": String(),
        "uid": String(),
        "resourceVersion": String(),
        "generation": Integer(),
        "creationTimestamp": String(),
        "deletionTimestamp": String(),
        "deletionGracePeriodSeconds": Integer(),
        "labels": Map(values=String()),
        "annotations": Map(values=String()),
        "ownerReferences": Array(items=Object(preserve_unknown=True)),
        "finalizers": Array(items=String()),
        "managedFields": Array(items=Object(preserve_unknown=True)),
        "selfLink": String(),
    },
    required=("name",),
)


def validate_metadata(meta: Any, walk: Walk) -> None:
    """Name, labels and annotations as the API server checks them for any object."""
    if not isinstance(meta, dict):
        return
    name = meta.get("name")
    if isinstance(name, str) and not L.is_dns_subdomain(name):
        walk.error(
            "metadata.name",
            f"Invalid value: {show(name)}: a lowercase RFC 1123 subdomain must consist of "
            "lower case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'example.com'), at most 253 characters",
        )
    if meta.get("namespace"):
        walk.error("metadata.namespace", "Forbidden: not allowed on this type (it is cluster-scoped)")
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            for problem in L.qualified_name_errors(key):
                walk.error(f"metadata.labels[{key_path(key)}]", f"Invalid value: {show(key)}: {problem}")
            if isinstance(value, str):
                for problem in L.label_value_errors(value):
                    walk.error(f"metadata.labels[{key_path(key)}]", f"Invalid value: {show(value)}: {problem}")
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for key, value in annotations.items():
            for problem in L.qualified_name_errors(key.lower()):
                walk.error(f"metadata.annotations[{key_path(key)}]", f"Invalid value: {show(key)}: {problem}")
            # The limit is in bytes (Go's len), not characters.
            size += len(key.encode()) + (len(value.encode()) if isinstance(value, str) else 0)
        if size > MAX_ANNOTATIONS_BYTES:
            walk.error("metadata.annotations", f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
