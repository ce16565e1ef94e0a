"""The ``Describe / Context / It`` paths of a Ginkgo test file, read from a git mirror of its
repository (``fetch`` brings one to /work/.mirror), to check every upstream ``It`` is here."""

from __future__ import annotations

import re
import subprocess
import sys

CONTAINERS = {"Describe", "Context", "FDescribe", "FContext", "DescribeTable", "When"}
LEAVES = {"It", "FIt", "PIt", "Entry", "FEntry"}
TOKEN = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|`[^`]*`|\'(?:[^\'\\]|\\.)+\'|\b([A-Z][A-Za-z]*)\(\s*("(?:[^"\\\n]|\\.)*"|`[^`]*`)|[()]',
    re.S,
)


def its(repo: str, path: str, commit: str = "HEAD") -> list[str]:
    """Every It and Entry of ``path`` whose text is a string literal, as its path of texts."""
    src = subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    depth = 0
    stack: list[tuple[str, int]] = []
    out: list[str] = []
    for m in TOKEN.finditer(src):
        text = m.group(0)
        if m.group(1):
            name, literal = m.group(1), m.group(2)
            value = literal[1:-1]
            if literal.startswith('"') and "\\" in value:
                value = value.encode("latin-1", "backslashreplace").decode("unicode_escape")
            depth += 1  # the call's own paren
            if name in CONTAINERS:
                stack.append((value, depth))
            elif name in LEAVES:
                out.append(" / ".join([v for v, _ in stack] + [value]))
            continue
        if text == "(":
            depth += 1
        elif text == ")":
            while stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
    return out


if __name__ == "__main__":
    for line in its(sys.argv[1], sys.argv[2]):
        print(line)
