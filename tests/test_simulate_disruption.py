"""``manage.py simulate --disruption``: the disruption planner once over documents, its JSON
as specified, the same commands the planner gives for the same cluster, every node with why,
invalid input named, nothing changed."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from provisioning.disruption import planner
from provisioning.services.catalog import bundled_catalog
from provisioning.services.disruptionview import claims_from_labels, read_picture

NOW = "2026-12-02T00:00:00Z"
MOMENT = datetime(2026, 12, 2, tzinfo=UTC)
NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole-test",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
    },
}


def nodepool(consolidate_after="5m", expire_after="720h", budgets=None):
    spec = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                ],
                "expireAfter": expire_after,
            }
        },
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": consolidate_after},
    }
    if budgets is not None:
        spec["disruption"]["budgets"] = budgets
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"}, "spec": spec}


def node(name, instance_type="m5.xlarge", zone="us-east-1a", created="2026-12-01T00:00:00Z", pool="general", **meta):
    labels = {
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/initialized": "true",
    }
    if pool:
        labels["karpenter.sh/nodepool"] = pool
    it = bundled_catalog().instance_type(instance_type)
    cpu, memory = it.allocatable["cpu"], it.allocatable["memory"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": created, "labels": labels, **meta},
        "status": {"allocatable": {"cpu": f"{cpu}m", "memory": str(memory), "pods": "58"}},
    }


def pod(name, node_name=None, cpu="500m", memory="1Gi", labels=None, created="2026-12-01T00:00:00Z", **meta):
    spec = {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node_name:
        spec["nodeName"] = node_name
    metadata = {"name": name, "namespace": "default", "labels": labels or {}, "creationTimestamp": created, **meta}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pdb(name, labels, min_available=1):
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }


def cluster():
    """A dear node with one small pod, a node whose pod a PDB holds, an empty node, a node
    that is not Karpenter's."""
    return [
        NODECLASS,
        nodepool(),
        node("ip-big", "m5.4xlarge"),
        node("ip-db", zone="us-east-1b"),
        node("ip-empty", zone="us-east-1c"),
        node("ip-other", "m5.large", pool=None),
        pod("web-1", "ip-big", labels={"app": "web"}),
        pod("db-0", "ip-db", cpu="1", memory="2Gi", labels={"app": "db"}),
        pdb("db", {"app": "db"}),
    ]


def run(tmp_path: Path, documents, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("simulate", "--disruption", "-f", str(path), *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def planner_commands(documents):
    """The planner asked directly, over the same documents read the same way."""
    catalog = bundled_catalog()
    claim_of = claims_from_labels(catalog, MOMENT)
    picture = read_picture(copy.deepcopy(documents), now=MOMENT, claim_of=claim_of, catalog=catalog)
    return planner.plan(picture.candidates, picture.policies, picture.snapshot, MOMENT.timestamp())


def test_the_json_is_the_planners_answer_in_the_documented_shape(tmp_path):
    code, out, _ = run(tmp_path, cluster(), "--now", NOW, "--format", "json")
    assert code == 0
    result = json.loads(out)
    assert set(result) == {"commands", "nodes", "stats"}
    assert set(result["stats"]) == {"nodes", "pods", "seconds"} and result["stats"]["pods"] == 2
    expected = planner_commands(cluster())
    assert [(c["reason"], c["candidates"]) for c in result["commands"]] == [
        (c.reason, list(c.candidates)) for c in expected.commands
    ]
    assert [c["savingsPerHour"] for c in result["commands"]] == [c.savings_per_hour for c in expected.commands]
    (command,) = result["commands"]
    assert command == {"reason": "Empty", "candidates": ["ip-empty"], "replacements": [], "savingsPerHour": 0.192}


def test_every_node_says_why_it_is_or_is_not_a_candidate(tmp_path):
    _, out, _ = run(tmp_path, cluster(), "--now", NOW, "--format", "json")
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert set(nodes) == {"ip-big", "ip-db", "ip-empty", "ip-other"}
    assert nodes["ip-empty"]["candidate"] is True and "empty" in nodes["ip-empty"]["reason"]
    assert nodes["ip-db"]["candidate"] is False
    assert "PodDisruptionBudget default/db" in nodes["ip-db"]["reason"] and "default/db-0" in nodes["ip-db"]["reason"]
    assert nodes["ip-other"] == {
        "name": "ip-other",
        "candidate": False,
        "reason": "not Karpenter's: the node has no karpenter.sh/nodepool label",
    }


def test_a_replacement_names_its_offering_and_its_pods(tmp_path):
    documents = [NODECLASS, nodepool(), node("ip-big", "m5.4xlarge"), pod("web-1", "ip-big")]
    _, out, _ = run(tmp_path, documents, "--now", NOW, "--format", "json")
    (command,) = json.loads(out)["commands"]
    assert command["reason"] == "Underutilized" and command["candidates"] == ["ip-big"]
    (replacement,) = command["replacements"]
    assert set(replacement) == {"nodePool", "instanceType", "capacityType", "zone", "pricePerHour", "pods"}
    assert replacement["nodePool"] == "general" and replacement["pods"] == ["default/web-1"]
    assert replacement["capacityType"] == "on-demand"
    price = bundled_catalog().instance_type("m5.4xlarge")
    dear = next(o.price for o in price.offerings if o.zone == "us-east-1a" and o.capacity_type == "on-demand")
    assert replacement["pricePerHour"] < dear
    assert command["savingsPerHour"] > 0


def test_consolidate_after_and_expire_after_are_judged_at_now(tmp_path):
    documents = [
        NODECLASS,
        nodepool(consolidate_after="1h", expire_after="48h"),
        node("ip-old", created="2026-11-29T00:00:00Z"),
        node("ip-new", zone="us-east-1b", created="2026-12-01T23:30:00Z"),
        pod("web-1", "ip-old"),
    ]
    _, out, _ = run(tmp_path, documents, "--now", NOW, "--format", "json")
    result = json.loads(out)
    assert [(c["reason"], c["candidates"]) for c in result["commands"]][0] == ("Expired", ["ip-old"])
    nodes = {n["name"]: n for n in result["nodes"]}
    assert "consolidateAfter 1h not reached" in nodes["ip-new"]["reason"]
    _, later, _ = run(tmp_path, documents, "--now", "2026-11-30T00:00:00Z", "--format", "json")
    assert "Expired" not in [c["reason"] for c in json.loads(later)["commands"]]


def test_a_zero_budget_is_named(tmp_path):
    documents = [NODECLASS, nodepool(budgets=[{"nodes": "0"}]), node("ip-empty")]
    _, out, _ = run(tmp_path, documents, "--now", NOW, "--format", "json")
    result = json.loads(out)
    assert result["commands"] == []
    (entry,) = result["nodes"]
    assert 'budget nodes "0"' in entry["reason"]


def test_invalid_input_exits_2_naming_the_document_and_field(tmp_path):
    documents = [NODECLASS, nodepool(consolidate_after="soon"), node("ip-a")]
    code, out, err = run(tmp_path, documents, "--now", NOW)
    assert code == 2 and out == ""
    assert "NodePool general" in err and "consolidateAfter" in err
    code, _, err = run(tmp_path, cluster(), "--now", "yesterday")
    assert code == 2 and "--now" in err


def test_an_unreadable_creation_timestamp_is_refused_not_read_as_now(tmp_path):
    """A node's age decides expiration and consolidateAfter: read as "now", a node created long
    ago would silently be neither expired nor consolidated."""
    for documents, document in (
        ([NODECLASS, nodepool(), node("ip-a", created="last week")], "Node ip-a"),
        ([NODECLASS, nodepool(), node("ip-a"), pod("web-1", "ip-a", created="2026-13-01T00:00:00Z")], "Pod"),
        # Python reads these; the API server's RFC 3339 does not (no time, no offset).
        ([NODECLASS, nodepool(), node("ip-a", created="2026-01-02")], "Node ip-a"),
        ([NODECLASS, nodepool(), node("ip-a", created="2026-01-02T03:04:05")], "Node ip-a"),
    ):
        code, out, err = run(tmp_path, documents, "--now", NOW)
        assert code == 2 and out == "", err
        assert document in err and "metadata.creationTimestamp" in err and "is not an RFC 3339 time" in err


def test_a_budget_the_api_server_would_refuse_is_invalid_input_not_a_budget_allowing_everything(tmp_path):
    """``minAvailable: "eighty"`` read as 0 would let the what-if evict every pod it guards."""
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": "eighty", "selector": {"matchLabels": {"app": "web"}}},
    }
    documents = [NODECLASS, nodepool(), node("ip-a"), pod("web-1", "ip-a", labels={"app": "web"}), budget]
    code, out, err = run(tmp_path, documents, "--now", NOW)
    assert code == 2 and out == "", err
    assert "PodDisruptionBudget default/web: spec.minAvailable: must be an integer or a percent" in err


def test_the_table_lists_commands_and_nodes(tmp_path):
    code, out, _ = run(tmp_path, cluster(), "--now", NOW)
    assert code == 0
    assert out.splitlines()[0] == "Empty: ip-empty (saves $0.1920/h)"
    assert "* ip-empty: " in out and "- ip-db: " in out


@pytest.mark.django_db
def test_nothing_is_changed(tmp_path):
    from provisioning.models import ClusterNode, Disruption, NodeClaim, NodePool

    run(tmp_path, cluster(), "--now", NOW, "--format", "json")
    assert not (NodePool.objects.exists() or NodeClaim.objects.exists() or ClusterNode.objects.exists())
    assert not Disruption.objects.exists()


def test_a_static_nodepool_is_reported_with_its_replicas_and_never_consolidated(tmp_path):
    """Two empty nodes of a static NodePool (replicas 2): counted, reported, left alone."""
    static = nodepool()
    static["metadata"]["name"] = "system"
    static["spec"]["replicas"] = 2
    documents = [NODECLASS, static, node("ip-s1", pool="system"), node("ip-s2", pool="system", zone="us-east-1b")]
    code, out, _ = run(tmp_path, documents, "--now", NOW, "--format", "json")
    assert code == 0
    result = json.loads(out)
    assert result["commands"] == []
    assert result["staticNodePools"] == [{"nodePool": "system", "replicas": 2, "nodes": 2}]
    reasons = {n["name"]: n["reason"] for n in result["nodes"]}
    assert all("static" in reasons[name] for name in ("ip-s1", "ip-s2")), reasons
    code, table, _ = run(tmp_path, documents, "--now", NOW)
    assert "static NodePool system: 2 of 2 replicas; never consolidated" in table
