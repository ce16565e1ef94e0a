"""bench/disruption.py on a tiny cluster: the rounds converge, nothing protected is disrupted,
and every figure is printed. (Times are printed, never asserted.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "disruption.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_disruption", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.django_db(transaction=True)  # replacements launch when their transaction commits
def test_a_tiny_cluster_is_consolidated_without_violations(capsys):
    from provisioning.models import ClusterNode, ClusterPod
    from provisioning.services import dispatch

    installed = dispatch._installed
    status = _bench().main(["--nodes", "20", "--pods", "150", "--seed", "3", "--json"])
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
