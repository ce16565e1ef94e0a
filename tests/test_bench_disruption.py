"""bench/disruption.py on a tiny cluster: the rounds converge, nothing protected is disrupted,
and every figure is printed. (Times are printed, never asserted.)"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "disruption.py"
GROUPS = BENCH.with_name("repack_groups.py")


def _bench(path: Path = BENCH):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.django_db(transaction=True)  # replacements launch when their transaction commits
def test_a_tiny_cluster_is_consolidated_without_violations(capsys):
    from provisioning.models import ClusterNode, ClusterPod
    from provisioning.services import dispatch

    installed = dispatch._installed
    bench = _bench()
    status = bench.main(["--nodes", "20", "--pods", "150", "--seed", "3", "--json"])
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])

    assert status == 0
    assert result["converged"]
    assert result["violations"] == 0
    assert result["violations_do_not_disrupt"] == 0 and result["violations_pdb"] == 0
    assert result["cluster"]["pods_placed"] == 150 and result["pods_left"] == 60
    assert result["nodes_before"] == 20 and result["nodes_after"] < 20
    assert result["cost_after"] < result["cost_before"]
    assert result["references"]["lp"] > 0 and result["cost_after"] >= result["references"]["lp"] * 0.999
    # The nodes nothing may disrupt keep every pod they held: the bound that keeps them holds.
    refs = result["references"]
    assert refs["pinned_nodes"] > 0 and result["held_pods_moved"] == 0
    assert refs["pinned_pods"] > sum(map(len, bench.pinned_pods().values()))  # more than the pinned pods alone
    assert result["cost_after"] >= refs["reachable"] * 0.999 and refs["reachable"] >= refs["lp"] * 0.999
    # A whole integer repacking under the same relaxations is never below that LP.
    assert refs["arranged_left"] == 0 and refs["arranged"] >= refs["reachable"] * 0.999
    assert result["evictions"] > 0 and result["pods_pending"] == 0
    assert ClusterPod.objects.exclude(node_name="").count() == 60  # every pod left runs somewhere
    assert ClusterNode.objects.count() == result["nodes_after"]
    assert dispatch._installed is installed  # the bench's dispatcher is gone again
    for figure in (
        "round that plans (disruption.run), p50 / max",
        "disruption.plan",
        "planner.plan (pure)",
        "greedy packing of the 60 pods",
        "rounds",
        "simulated wall time to converge",
        "nodes before -> after",
        "$/h before -> after",
        "after / LP bound of the remaining pods",
        "evictions",
        "violations: do-not-disrupt pods disrupted",
        "violations: PDB left below its requirement",
        "targets:",
    ):
        assert figure in out, figure

    # What repacking could still do on the cluster the bench left converged.
    assert _bench(GROUPS).main(["--samples", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "candidates for consolidation" in out and "all packed at once" in out
    counts = [int(n) for n in re.findall(r"random groups of \d: (\d+) of 3 repacked", out)]
    assert counts and all(0 <= n <= 3 for n in counts)
    # The whole repacking with the pinned nodes as they are now is never below its LP bound.
    bound, arranged = map(float, re.search(r"bound \$([\d.]+)/h, whole repacking \$([\d.]+)/h", out).groups())
    assert arranged >= bound * 0.999 and bound >= refs["lp"] * 0.999


@pytest.mark.django_db
def test_repack_groups_says_so_when_there_is_no_cluster_to_read(capsys):
    assert _bench(GROUPS).main([]) == 2
    assert "run bench/disruption.py with the same DATABASE_URL first" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_repacking_goes_on_where_upstreams_methods_stop(capsys):
    """On 100 nodes: the same cluster consolidated with upstream's methods alone and then with
    repacking too; the latter's commands are planned, re-checked, carried out and leave the
    cluster cheaper, with nothing protected disrupted."""
    from django.conf import settings
    from django.core.management import call_command

    from provisioning.models import Disruption

    bench = _bench()
    results = {}
    for label, flags in (("upstream", ["--without-repacking"]), ("repacking", [])):
        assert bench.main(["--small", "--progress", "0", "--json", *flags]) == 0
        results[label] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        results[label]["repacked"] = Disruption.objects.filter(method="repacking", state=Disruption.State.DONE).count()
        call_command("flush", verbosity=0, interactive=False)
    assert settings.KARPWEB_REPACKING  # the bench put the setting back
    upstream, repacking = results["upstream"], results["repacking"]
    assert upstream["repacked"] == 0 and repacking["repacked"] > 0
    assert repacking["converged"] and repacking["violations"] == 0 and repacking["pods_pending"] == 0
    assert repacking["cost_after"] < upstream["cost_after"]
    assert repacking["cost_after"] >= repacking["references"]["reachable"] * 0.999  # no cheaper than the bound


ZONES = tuple(f"us-east-1{z}" for z in "abcdef")


def _spread_pods(count: int, prefix: str) -> list:
    from provisioning.scheduling.labelselector import LabelSelector
    from provisioning.scheduling.pods import Pod, TopologySpreadConstraint

    spread = TopologySpreadConstraint(
        1, "topology.kubernetes.io/zone", "DoNotSchedule", LabelSelector.from_manifest({"matchLabels": {"app": "web"}})
    )
    requests = {"cpu": 250, "memory": 512 * 2**20, "pods": 1}
    return [Pod("default", f"{prefix}-{i}", requests, {"app": "web"}, topology_spread=(spread,)) for i in range(count)]


@pytest.mark.parametrize(
    ("moving", "fixed_in_a", "shares"),
    [
        # 36 pods, maxSkew 1 over six zones: every zone holds at least ceil((36 - 5) / 6) = 6.
        (36, 0, {zone: 6 for zone in ZONES}),
        # Six of them stay in zone a: it lacks none, the five others six each.
        (30, 6, {zone: 6 for zone in ZONES[1:]}),
        # Two stay in zone a: it lacks four.
        (34, 2, {ZONES[0]: 4, **{zone: 6 for zone in ZONES[1:]}}),
        # Twelve stay in zone a: a spread needs more in the other zones than there are pods to
        # move (ceil((18 - 5) / 6) = 3 each, 15 > 6): left whole rather than made infeasible.
        (6, 12, {}),
    ],
)
def test_the_bound_keeps_each_zones_least_share_counting_the_pods_that_stay(moving, fixed_in_a, shares):
    from bench.scenarios import instance_types, nodepool
    from bench.solver import pod_classes
    from provisioning.scheduling.lowerbound import PodClass

    bench = _bench()
    pool = nodepool(instance_types())
    pods = _spread_pods(moving, "moving")
    fixed = _spread_pods(fixed_in_a, "fixed")
    classes, _ = pod_classes(pods, pool)
    out = bench._zone_shares(classes, pods, pods + fixed, pool, ZONES, PodClass, {p.key: ZONES[0] for p in fixed})

    free, *per_zone = out
    assert free.count == moving - sum(shares.values())
    kept = {}
    for c in per_zone:
        (zone,) = [z for z in ZONES if any(c.compatible(t) for t in _in_zone(pool, z))]
        kept[zone] = c.count
    assert kept == shares


def _in_zone(pool, zone):
    from dataclasses import replace

    out = [replace(t, offerings=tuple(o for o in t.offerings if o.zone == zone)) for t in pool.instance_types]
    return [t for t in out if t.offerings]
