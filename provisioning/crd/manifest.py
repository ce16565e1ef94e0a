"""Reading and writing manifests: YAML or JSON in, kubectl-style YAML out.

Reading is defensive because manifests come from strangers (the webhook, REST, uploads):
a size limit before parsing, no YAML tags beyond plain data, timestamps kept as the
strings Kubernetes sees, and a bound on nesting depth and on the expanded size of YAML
aliases (a "billion laughs" document expands to nothing here).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import yaml

from provisioning.crd.errors import ManifestError

MAX_BYTES = 3 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000


class _Loader(yaml.SafeLoader):
    """SafeLoader minus the timestamp resolver: Kubernetes keeps timestamps as strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_files(names: list[str]) -> list[dict[str, Any]]:
    """Every document of the files named (``-`` reads standard input), in order.

    Raises ManifestError naming the file for one that cannot be read or parsed."""
    import sys
    from pathlib import Path

    documents: list[dict[str, Any]] = []
    for name in names:
        try:
            text = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise ManifestError(exc.strerror or str(exc), name) from None
        documents += load_documents(text, source="stdin" if name == "-" else name)
    return documents


def load_documents(text: str | bytes, source: str = "input", max_bytes: int = MAX_BYTES) -> list[dict[str, Any]]:
    """Parse every document in ``text``; a ``kind: List`` is unwrapped into its items.

    Raises ManifestError naming the source and document on anything unreadable.
    """
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise ManifestError(_too_big(len(text), max_bytes), source)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"not UTF-8 text (byte {exc.start})", source) from None
    elif len(text) > max_bytes:
        raise ManifestError(_too_big(len(text.encode("utf-8", "replace")), max_bytes), source)
    stripped = text.lstrip()
    try:
        if stripped.startswith(("{", "[")):
            docs = [json.loads(text)]
        else:
            docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except RecursionError:
        raise ManifestError(f"nested more than {MAX_DEPTH} levels deep", source) from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", source) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"not valid YAML: {_yaml_problem(exc)}", source) from None
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs, start=1):
        where = f"{source} document {index}" if len(docs) > 1 else source
        check_shape(doc, where)
        if not isinstance(doc, dict):
            raise ManifestError(f"expected a mapping (apiVersion, kind, metadata, spec), got {_type(doc)}", where)
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for item_index, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise ManifestError(f"items[{item_index}] is {_type(item)}, expected a mapping", where)
                out.append(item)
        else:
            out.append(doc)
    return out


def load_document(text: str | bytes, source: str = "input", max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    docs = load_documents(text, source, max_bytes)
    if len(docs) != 1:
        raise ManifestError(f"expected exactly one document, found {len(docs)}", source)
    return docs[0]


def check_shape(value: Any, source: str) -> None:
    """Reject documents nested too deep or, through aliases, too large to walk."""
    budget = [MAX_NODES]
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ManifestError(f"nested more than {MAX_DEPTH} levels deep", source)
        budget[0] -= 1
        if budget[0] < 0:
            raise ManifestError(f"more than {MAX_NODES} values (after expanding YAML aliases)", source)
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise ManifestError(f"mapping key {key!r} is not a string", source)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        elif not (node is None or isinstance(node, str | int | float | bool)):
            raise ManifestError(f"unsupported value of type {type(node).__name__}", source)


# One step of a field path: ``.name``, ``[3]``, ``[nvidia.com/gpu]`` or ``['odd key']``.
_PATH_STEP = re.compile(r"\.?([^.\[\]]+)|\[('(?:[^'\\]|\\.)*'|[^\]]*)\]")


def line_of(text: str, path: str) -> int | None:
    """The line of ``text`` (one YAML or JSON document) where the field ``path`` of a
    validation error is written or, for a field that is not, where its nearest written
    parent is; None when the text cannot be composed."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    line = node.start_mark.line + 1
    for match in _PATH_STEP.finditer(path):
        step = match.group(1) if match.group(1) is not None else match.group(2)
        if step.startswith("'"):
            step = ast.literal_eval(step)
        found = _child(node, step)
        if found is None:
            break
        # A field's line is its key's: a mapping value starts on the line after it.
        line, node = found[0].start_mark.line + 1, found[1]
    return line


def _child(node: yaml.Node, step: str) -> tuple[yaml.Node, yaml.Node] | None:
    """(where the step is written, its value) in ``node``."""
    if isinstance(node, yaml.MappingNode):
        return next(((key, value) for key, value in node.value if key.value == step), None)
    if isinstance(node, yaml.SequenceNode) and step.isdigit() and int(step) < len(node.value):
        return node.value[int(step)], node.value[int(step)]
    return None


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    """kubectl's style: keys sorted, block style, ``---`` between documents."""
    return "---\n".join(
        yaml.dump(doc, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1000)
        for doc in documents
    )


class _Dumper(yaml.SafeDumper):
    """Indents lists under their key, as kubectl does."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _too_big(size: int, limit: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB is over the {limit / 1024 / 1024:.0f} MiB limit for a manifest"


def _type(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"{problem} at line {mark.line + 1} column {mark.column + 1}"
    return problem
