#!/usr/bin/env python3
"""What repacking could still do on a cluster the disruption bench left converged.

    DATABASE_URL=sqlite:////tmp/c.sqlite3 .venv/bin/python bench/disruption.py --nodes 300 --pods 3000
    DATABASE_URL=sqlite:////tmp/c.sqlite3 .venv/bin/python bench/repack_groups.py [--samples 200] [--seed 2]

It reads the rows as the disruption service does (``disruption._picture``) and asks the
planner's own repacking (``_repack_group``: THE solver's packing of a group's pods onto the
other nodes' room and new nodes, made when it saves ``REPACK_MIN_SAVINGS``) about groups no
round looked at. Printed, per NodePool:

* its candidates and their price, and THE solver's packing of all of them at once (the
  simulation a repacking of them all would run, budgets ignored) with what it would save;
* of ``--samples`` random groups of each size from two to five (seeded), how many repacking
  would make, and the best saving;
* the groups that packing suggests (per new node, and per other node taking pods, the
  candidates whose pods it takes, five at most): how many repacking would make.

Then the bench's whole repacking (``reachable_bound``'s arrangement) with the pinned nodes
holding what they hold now, beside the bound keeping them: set beside the bench's own figures
(the nodes as they held the pods when the rounds began), it says how much of what is left comes
from which pods filled their room.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="random groups of each size")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args(argv)

    import django

    django.setup()
    from django.utils import timezone

    from bench import disruption as bench
    from provisioning.disruption import planner
    from provisioning.models import ClusterPod
    from provisioning.scheduling.solver import solve
    from provisioning.services import disruption
    from provisioning.services.catalog import load_catalog

    if not ClusterPod.objects.exists():
        print("no cluster in DATABASE_URL: run bench/disruption.py with the same DATABASE_URL first")
        return 2
    # Far enough on that no node still backs off after a cancelled re-check.
    now = timezone.now() + timedelta(days=30)
    picture = disruption._picture(now)
    round_ = planner._Round(picture.candidates, picture.policies, picture.snapshot, now.timestamp(), False, solve)
    candidates = round_._consolidatable(round_._open(picture.candidates))
    rng = random.Random(args.seed)
    print(f"cluster: {len(picture.candidates):,} nodes; candidates for consolidation: {len(candidates)}")
    for pool in sorted({c.nodepool for c in candidates}):
        members = [c for c in candidates if c.nodepool == pool]
        price = sum(c.price_per_hour for c in members)
        whole = round_._simulate(members, optimize=True)
        new = sum(claim.options[0].price for claim in whole.plan.claims)
        names = {c.name for c in members}
        onto = sum(len(keys) for node, keys in whole.plan.existing.items() if node not in names)
        failed = f" ({whole.failure})" if whole.failure else ""
        print(
            f"\n{pool}: {len(members)} candidates, ${price:.2f}/h; all packed at once: {len(whole.plan.claims)} new "
            f"nodes ${new:.2f}/h and {onto} pods onto other nodes, saving {(price - new) / price:.1%}{failed}"
        )
        for size in range(2, min(5, len(members)) + 1):
            made = [round_._repack_group(rng.sample(members, size)) for _ in range(args.samples)]
            savings = [c.savings_per_hour for c in made if c is not None]
            best = f", best saves ${max(savings):.3f}/h" if savings else ""
            print(f"  random groups of {size}: {len(savings)} of {args.samples} repacked{best}")
        suggested = _suggested_groups(members, whole.plan, planner.REPACK_MAX_NODES)
        made = [round_._repack_group([c for c in members if c.name in group]) for group in suggested]
        print(f"  groups the whole packing suggests: {sum(c is not None for c in made)} of {len(suggested)} repacked")
    # What the bench reads as the rounds begin, read now: every pod on a node nothing may disrupt.
    refs = bench.references(load_catalog(), bench.held_at_start())
    print(
        f"\nthe pinned nodes holding what they hold now ({refs['pinned_pods']:,} pods on {refs['pinned_nodes']} "
        f"nodes): bound ${refs['reachable']:.2f}/h, whole repacking ${refs['arranged']:.2f}/h "
        f"({refs['arranged'] / refs['lp']:.3f} of the pooled LP ${refs['lp']:.2f}/h)"
    )
    return 0


def _suggested_groups(members, plan, limit: int) -> list[frozenset[str]]:
    """Per node of the whole packing (new, or another taking pods), the candidates whose pods it
    takes, ``limit`` at most (those giving it the most), once each."""
    owner = {p.key: c.name for c in members for p in c.pods}
    names = {c.name for c in members}
    takers = [claim.pods for claim in plan.claims]
    takers += [keys for node, keys in plan.existing.items() if node not in names]
    groups: list[frozenset[str]] = []
    for keys in takers:
        counts = Counter(owner[k] for k in keys if k in owner)
        group = frozenset(name for name, _ in counts.most_common(limit))
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


if __name__ == "__main__":
    sys.exit(main())
