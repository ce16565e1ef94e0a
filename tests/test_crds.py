"""deploy/crds/ is rendered from the validator's schema and kept current."""

from __future__ import annotations

from pathlib import Path

import yaml
from django.core.management import call_command

from provisioning.crd.render import all_crds

ROOT = Path(__file__).resolve().parent.parent


def test_deploy_crds_are_current():
    call_command("crds", "--check")  # raises CommandError naming the stale file


def test_the_crds_carry_the_published_cel_rules_and_defaults():
    crds = {name: yaml.safe_load((ROOT / "deploy" / "crds" / name).read_text()) for name in all_crds()}
    nodepool = crds["karpenter.sh_nodepools.yaml"]
    assert nodepool["metadata"]["name"] == "nodepools.karpenter.sh"
    version = nodepool["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    requirements = spec["properties"]["template"]["properties"]["spec"]["properties"]["requirements"]
    messages = [rule["message"] for rule in requirements["x-kubernetes-validations"]]
    assert "requirements with operator 'In' must have a value defined" in messages
    assert spec["properties"]["disruption"]["properties"]["budgets"]["default"] == [{"nodes": "10%"}]
    assert "WhenUnderutilized" in spec["properties"]["disruption"]["properties"]["consolidationPolicy"]["enum"]
    assert nodepool["spec"]["scope"] == "Cluster"
    nodeclass = crds["karpenter.k8s.aws_ec2nodeclasses.yaml"]
    assert nodeclass["spec"]["names"]["shortNames"] == ["ec2nc", "ec2ncs"]
    nc_spec = nodeclass["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(nc_spec["required"]) == {"amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"}


def test_every_rule_in_the_crds_has_a_message():
    def walk(node):
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                assert rule["rule"] and rule["message"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for manifest in all_crds().values():
        walk(manifest)
