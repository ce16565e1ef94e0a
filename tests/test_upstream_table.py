"""The table of ported upstream tests (tests/upstream/README.md) is what the modules say, and
every upstream It of the ported files is in it, ported or with the reason it is not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "upstream"
sys.path.insert(0, str(HERE))

import goits  # noqa: E402
import table  # noqa: E402

MIRRORS = {
    "kubernetes-sigs/karpenter": Path("/work/.mirror/kubernetes-sigs+karpenter/repo"),
    "aws/karpenter-provider-aws": Path("/work/.mirror/aws+karpenter-provider-aws/repo"),
}


def test_the_readme_table_is_up_to_date():
    assert table.main(["--check"]) == 0, "run: .venv/bin/python tests/upstream/table.py --write"


def test_every_upstream_it_is_ported_or_says_why_not():
    sources: dict[tuple[str, str], set[str]] = {}
    for path in sorted(HERE.glob("test_*.py")):
        source, commit, rows = table.rows_of(path)
        sources.setdefault((source, commit), set()).update(upstream.strip() for upstream, _, _ in rows)
    checked = 0
    for (source, commit), ours in sources.items():
        repo, _, path = source.partition(" ")
        mirror = MIRRORS[repo]
        if not mirror.exists():
            pytest.skip(f"needs a git mirror of {repo} at {mirror} (the search tool's fetch brings one)")
        theirs = {it.strip() for it in goits.its(str(mirror), path, commit)}
        assert not theirs - ours, f"{source}: upstream Its neither ported nor listed: {sorted(theirs - ours)[:10]}"
        checked += len(theirs)
    assert checked > 450  # (Entries named by a Go expression rather than a literal are not read)
