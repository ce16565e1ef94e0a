"""``manage.py simulate``: documents → the solver's snapshot, the plan as JSON and as a table,
exit 2 naming the document and field on invalid input, and end to end with the solver."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from provisioning.crd.labels import ARCH, CAPACITY_TYPE, NODEPOOL, OS
from provisioning.crd.manifest import load_documents
from provisioning.scheduling.plan import ClaimPlan, InstanceTypeOption, Plan
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.taints import Taint
from provisioning.services import simulate
from provisioning.services.catalog import bundled_catalog
from provisioning.services.simulate import (
    HOURS_PER_MONTH,
    SimulateError,
    build_snapshot,
    plan_documents,
    plan_to_json,
    plan_to_table,
)

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "simulate"
NODECLASS = FIX / "ec2nodeclass.yaml"
SEED = FIX / "nodepool-seed.yaml"
WORKING = FIX / "nodepool-working.yaml"
APP = FIX / "app.yaml"
GI = 2**30
FAMILY = "karpenter.k8s.aws/instance-family"
CATEGORY = "karpenter.k8s.aws/instance-category"
# web 10 + api 4 + batch (parallelism) 3
PENDING = [f"default/web-{i}" for i in range(10)] + [f"default/api-{i}" for i in range(4)]
PENDING += [f"default/batch-{i}" for i in range(3)]


def docs(*paths: Path) -> list[dict]:
    out: list[dict] = []
    for path in paths:
        out += load_documents(path.read_bytes(), source=str(path))
    return out


def stand_in(snapshot: Snapshot) -> Plan:
    """A tiny solver for tests of everything around it: every pending pod on one NodeClaim
    of the first NodePool, at the cheapest available offering of its three cheapest types."""
    if not snapshot.nodepools:
        return Plan(claims=(), existing={}, unschedulable={pod.key: "no NodePool" for pod in snapshot.pods})
    pool = snapshot.nodepools[0]
    offers = sorted(
        (
            InstanceTypeOption(it.name, o.capacity_type, o.zone, o.price)
            for it in pool.instance_types
            for o in it.available_offerings()
        ),
        key=lambda o: (o.price, o.instance_type, o.zone, o.capacity_type),
    )
    options: list[InstanceTypeOption] = []
    for offer in offers:
        if all(o.instance_type != offer.instance_type for o in options):
            options.append(offer)
        if len(options) == 3:
            break
    claim = ClaimPlan(
        name=f"{pool.name}-0",
        nodepool=pool.name,
        requirements=pool.requirements,
        options=tuple(options),
        pods=tuple(pod.key for pod in snapshot.pods),
        requests={},
    )
    return Plan(claims=(claim,), existing={}, unschedulable={}, solve_seconds=0.01)


def run(*args: str, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        call_command("simulate", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def with_stand_in(monkeypatch):
    monkeypatch.setattr(simulate, "default_solver", lambda: stand_in)


def real_solve():
    return pytest.importorskip("provisioning.scheduling.solver", reason="the solver has not landed yet").solve


def nodepool(name: str, *, requirements=None, nodeclass="default", **spec) -> dict:
    template_spec = {
        "requirements": requirements or [{"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
    }
    template: dict = {"spec": template_spec}
    for field in ("taints", "startupTaints"):
        if field in spec:
            template_spec[field] = spec.pop(field)
    if "labels" in spec:
        template["metadata"] = {"labels": spec.pop("labels")}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def deployment(name: str, replicas: int = 2, cpu="500m", memory="1Gi") -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                    ]
                },
            },
        },
    }


def write(tmp_path: Path, name: str, documents: list[dict] | str) -> str:
    path = tmp_path / name
    path.write_text(documents if isinstance(documents, str) else yaml.safe_dump_all(documents))
    return str(path)


# ------------------------------------------------------------------ documents → snapshot


def test_the_working_nodepool_becomes_requirements_limits_and_the_nodeclass_instance_types():
    snapshot, notes = build_snapshot(docs(NODECLASS, WORKING, APP))
    (pool,) = snapshot.nodepools
    assert pool.name == "general" and pool.nodeclass == "default" and pool.weight == 0
    reqs = pool.requirements
    assert reqs[CATEGORY].values == {"c", "m", "r"} and not reqs[CATEGORY].complement
    assert reqs[CAPACITY_TYPE].values == {"spot", "on-demand"}
    assert reqs[ARCH].values == {"amd64", "arm64"}
    size = reqs["karpenter.k8s.aws/instance-size"]
    assert size.complement and size.values == {"nano", "micro", "small"}
    assert reqs[NODEPOOL].values == {"general"} and not reqs[NODEPOOL].complement
    assert pool.labels == {NODEPOOL: "general"}
    assert pool.limits == {"cpu": 1000 * 1000, "memory": 1000 * GI}
    assert pool.taints == () and pool.in_use == {}
    # Every type the AL2023 EC2NodeClass can launch, both architectures, offered in every zone.
    catalog = bundled_catalog("us-east-1")
    assert [it.name for it in pool.instance_types] == [it.name for it in catalog.instance_types(None)]
    assert {it.labels[ARCH] for it in pool.instance_types} == {"amd64", "arm64"}
    zones = {o.zone for it in pool.instance_types for o in it.offerings}
    assert zones == set(catalog.zones) and len(zones) == 6
    assert {o.capacity_type for it in pool.instance_types for o in it.available_offerings()} == {"spot", "on-demand"}
    # Workloads: replicas named <name>-<i> in the default namespace; the Job's parallelism.
    assert [pod.key for pod in snapshot.pods] == PENDING
    web = snapshot.pods[0]
    assert web.requests["cpu"] == 500 and web.requests["memory"] == GI
    batch = snapshot.pods[-1]
    assert batch.requests["cpu"] == 4000 and batch.requests["memory"] == 16 * GI
    (daemonset,) = snapshot.daemonsets
    assert daemonset.key == "default/log-agent" and daemonset.requests["cpu"] == 100
    assert snapshot.nodes == ()
    assert any(note.startswith("skipped Service web") for note in notes)
    assert any(note.startswith("skipped ConfigMap web-config") for note in notes)
    assert not any("Namespace" in note for note in notes)  # read: its labels serve namespaceSelectors
    assert snapshot.namespaces["shop"]["kubernetes.io/metadata.name"] == "shop"


def test_labels_taints_weights_limits_existing_nodes_and_a_missing_nodeclass():
    documents = [
        nodepool(
            "ml",
            weight=50,
            labels={"team": "ml"},
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            startupTaints=[{"key": "example.com/booting", "effect": "NoExecute"}],
            limits={"cpu": "64", "memory": "256Gi", "nodes": 5, "nvidia.com/gpu": 8},
            nodeclass="gpu",
        ),
        nodepool("general", nodeclass="default"),
        yaml.safe_load(NODECLASS.read_text()),
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1", "labels": {NODEPOOL: "ml", "team": "ml"}},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "58"}},
        },
        deployment("web"),
    ]
    snapshot, notes = build_snapshot(documents)
    ml, general = snapshot.nodepools
    assert ml.weight == 50 and general.weight == 0
    assert ml.requirements["team"].values == {"ml"}
    assert ml.requirements[NODEPOOL].values == {"ml"}
    assert ml.labels == {"team": "ml", NODEPOOL: "ml"}
    assert ml.taints == (Taint("nvidia.com/gpu", "true", "NoSchedule"),)
    assert ml.startup_taints == (Taint("example.com/booting", "", "NoExecute"),)
    assert ml.limits == {"cpu": 64_000, "memory": 256 * GI, "nodes": 5, "nvidia.com/gpu": 8}
    assert ml.in_use == {"cpu": 8000, "memory": 32 * GI, "pods": 58, "nodes": 1}
    assert general.in_use == {}
    assert ml.nodeclass == "gpu" and ml.instance_types  # the AL2023 defaults
    assert any("EC2NodeClass 'gpu' is not in the input" in n and "AL2023" in n and "every zone" in n for n in notes)
    assert [node.name for node in snapshot.nodes] == ["ip-10-0-0-1"]
    assert [pod.key for pod in snapshot.pods] == ["default/web-0", "default/web-1"]


def test_the_ec2nodeclass_decides_which_instance_types_a_nodepool_gets():
    windows = yaml.safe_load(NODECLASS.read_text())
    windows["metadata"]["name"] = "windows"
    windows["spec"]["amiSelectorTerms"] = [{"alias": "windows2022@latest"}]
    documents = [
        yaml.safe_load(NODECLASS.read_text()),
        windows,
        nodepool("linux", nodeclass="default"),
        nodepool("win", nodeclass="windows"),
    ]
    snapshot, _ = build_snapshot(documents)
    linux, win = snapshot.nodepools
    assert {it.labels[ARCH] for it in linux.instance_types} == {"amd64", "arm64"}
    assert {it.labels[ARCH] for it in win.instance_types} == {"amd64"}
    assert {it.labels[OS] for it in win.instance_types} == {"windows"}
    assert 0 < len(win.instance_types) < len(linux.instance_types)


def test_zones_narrow_the_offerings_and_unknown_zones_are_invalid():
    snapshot, _ = build_snapshot(docs(NODECLASS, WORKING), zones=["a", "us-east-1c"])
    zones = {o.zone for it in snapshot.nodepools[0].instance_types for o in it.offerings}
    assert zones == {"us-east-1a", "us-east-1c"}
    with pytest.raises(SimulateError, match=r"--zones: 'us-east-1z' is not a zone of us-east-1"):
        build_snapshot(docs(NODECLASS, WORKING), zones=["us-east-1z"])


def test_invalid_policies_name_the_document_and_every_field():
    bad = nodepool("general", weight=500)
    bad["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Within"
    with pytest.raises(SimulateError) as caught:
        build_snapshot([bad, deployment("web")])
    assert caught.value.problems[0].startswith(
        'NodePool general: spec.template.spec.requirements[0].operator: Unsupported value: "Within"'
    )
    assert any(p.startswith("NodePool general: spec.weight: Invalid value: 500") for p in caught.value.problems)
    with pytest.raises(SimulateError, match=r"NodePool general: metadata.name: NodePool general is defined more"):
        build_snapshot([nodepool("general"), nodepool("general")])


def test_a_bad_workload_names_the_document_and_the_field_path():
    with pytest.raises(SimulateError) as caught:
        build_snapshot([nodepool("general"), deployment("web", cpu="lots")])
    assert str(caught.value).startswith("Deployment web: spec.template.spec.containers[0].resources.requests.cpu:")


def test_validator_warnings_become_notes():
    _, notes = build_snapshot(docs(NODECLASS, SEED))
    assert any(n.startswith("warning: NodePool general:") and "WhenUnderutilized" in n for n in notes)
    assert any(n.startswith("warning: NodePool general:") and "instance-category" in n for n in notes)


# ------------------------------------------------------------------ plan → JSON and table


def hand_made_plan() -> tuple[Plan, Snapshot]:
    snapshot, _ = build_snapshot(
        [
            nodepool("general"),
            deployment("web", replicas=3),
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-1"}, "status": {"capacity": {"cpu": "4"}}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-2"}, "status": {"capacity": {"cpu": "4"}}},
        ]
    )
    options = (
        InstanceTypeOption("m7i.large", "spot", "us-east-1a", 0.0419),
        InstanceTypeOption("m7i.large", "spot", "us-east-1b", 0.0431),
        InstanceTypeOption("c7i.xlarge", "on-demand", "us-east-1a", 0.1785),
    )
    claims = (
        ClaimPlan("general-a1", "general", Requirements(), options, ("default/web-0",), {}),
        ClaimPlan("general-b2", "general", Requirements(), options[2:], (), {}),
    )
    plan = Plan(
        claims=claims,
        existing={"ip-2": ("default/web-1",)},
        unschedulable={"default/web-2": "karpenter.sh/capacity-type In [on-demand] ... no offering"},
        solve_seconds=0.25,
    )
    return plan, snapshot


def test_the_json_has_exactly_the_shape_of_the_issue():
    plan, snapshot = hand_made_plan()
    out = plan_to_json(plan, snapshot)
    assert list(out) == ["nodeClaims", "existingNodes", "unschedulable", "totalPricePerHour", "stats", "violations"]
    # The hand-made plan names a NodePool the snapshot does not have: THE verifier says so.
    assert out["violations"] and all(list(v) == ["kind", "nodeClaim", "pod", "message"] for v in out["violations"])
    first = out["nodeClaims"][0]
    assert list(first) == [
        "name",
        "nodePool",
        "instanceType",
        "capacityType",
        "zone",
        "pricePerHour",
        "listPricePerHour",
        "overlays",
        "instanceTypeOptions",
        "pods",
    ]
    assert first == {
        "name": "general-a1",
        "nodePool": "general",
        "instanceType": "m7i.large",
        "capacityType": "spot",
        "zone": "us-east-1a",
        "pricePerHour": 0.0419,
        "listPricePerHour": 0.0419,  # no NodeOverlay: the list price is the price
        "overlays": [],
        "instanceTypeOptions": ["m7i.large", "c7i.xlarge"],  # distinct, price order, chosen first
        "pods": ["default/web-0"],
    }
    assert out["existingNodes"] == [{"name": "ip-1", "pods": []}, {"name": "ip-2", "pods": ["default/web-1"]}]
    assert out["unschedulable"] == [
        {"pod": "default/web-2", "reason": "karpenter.sh/capacity-type In [on-demand] ... no offering"}
    ]
    assert out["totalPricePerHour"] == pytest.approx(0.0419 + 0.1785)
    assert isinstance(out["totalPricePerHour"], float)
    assert out["stats"] == {"pods": 3, "solveSeconds": 0.25}
    assert isinstance(out["stats"]["pods"], int)
    assert json.loads(json.dumps(out)) == out


def test_the_table_lists_claims_existing_nodes_unschedulable_pods_and_the_totals():
    plan, snapshot = hand_made_plan()
    text = plan_to_table(plan, snapshot)
    lines = text.splitlines()
    assert lines[0].split() == ["NODECLAIM", "NODEPOOL", "INSTANCE", "TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS"]
    assert lines[1].split() == ["general-a1", "general", "m7i.large", "spot", "us-east-1a", "0.0419", "1"]
    assert lines[2].split() == ["general-b2", "general", "c7i.xlarge", "on-demand", "us-east-1a", "0.1785", "0"]
    assert any(line.split() == ["ip-2", "1"] for line in lines)
    assert any(line.startswith("default/web-2") and "no offering" in line for line in lines)
    total = 0.0419 + 0.1785
    assert f"Total: ${total:.4f}/hour, ${total * HOURS_PER_MONTH:,.2f}/month (730 h)." in text
    assert "Plan: 2 NodeClaims to launch for 1 pods, 1 pods on existing nodes, 1 unschedulable." in text


def test_an_empty_plan_reads_well():
    text = plan_to_table(Plan(claims=(), existing={}, unschedulable={}))
    assert text.startswith("No NodeClaims to launch.")
    assert "Total: $0.0000/hour, $0.00/month (730 h)." in text


def test_plan_documents_takes_the_solver_as_a_parameter():
    snapshot, plan, notes = plan_documents(docs(NODECLASS, WORKING, APP), solver=stand_in)
    assert plan.claims[0].pods == tuple(PENDING)
    assert plan_to_json(plan, snapshot)["stats"]["pods"] == 17


# ------------------------------------------------------------------ the command


def test_the_command_prints_json_and_notes_skipped_kinds_on_stderr(with_stand_in):
    code, out, err = run("-f", str(NODECLASS), "-f", str(WORKING), "-f", str(APP), "--format", "json")
    # The stand-in puts all 17 pods on one small node of types the NodePool does not allow: the
    # plan is printed, THE verifier says what it breaks on stderr, and the exit status says it
    # would not be launched.
    assert code == 3
    data = json.loads(out)
    assert set(data) == {"nodeClaims", "existingNodes", "unschedulable", "totalPricePerHour", "stats", "violations"}
    assert data["nodeClaims"][0]["pods"] == PENDING
    assert data["stats"]["pods"] == 17
    assert {v["kind"] for v in data["violations"]} == {"nodepool", "resources"}
    assert "violation: resources: node general-0: cpu: its pods and DaemonSets ask" in err
    assert "skipped Service web" in err and "skipped ConfigMap web-config" in err and "Namespace" not in err
    assert "skipped" not in out


def test_the_command_prints_a_table_by_default():
    code, out, err = run("-f", str(NODECLASS), "-f", str(WORKING), "-f", str(APP))
    assert code == 0, err
    assert out.splitlines()[0].startswith("NODECLAIM")
    assert "/month (730 h)." in out
    assert "violation" not in err


def test_the_command_reads_stdin(monkeypatch):
    stdin = NODECLASS.read_bytes() + b"\n---\n" + WORKING.read_bytes() + b"\n---\n" + APP.read_bytes()
    code, out, _ = run("-f", "-", "--format", "json", stdin=stdin, monkeypatch=monkeypatch)
    data = json.loads(out)
    assert code == 0 and data["stats"]["pods"] == 17 and data["violations"] == []


def test_the_command_reads_the_scheduler_config_and_the_policies(tmp_path):
    """--scheduler-config gives default spreads (upstream's SCHEDULER_CONFIG); a bad one is
    invalid input naming the field."""
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        "podTopologySpread:\n  defaultConstraints:\n"
        "  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n"
    )
    args = ("-f", str(NODECLASS), "-f", str(WORKING), "-f", str(APP), "--format", "json")
    code, out, err = run(*args, "--scheduler-config", str(config), "--min-values-policy", "BestEffort")
    assert code == 0, err
    zones = {c["zone"] for c in json.loads(out)["nodeClaims"] if any(p.startswith("default/web-") for p in c["pods"])}
    assert len(zones) >= 3  # the 10 web replicas spread over the zones by the default
    config.write_text("podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 0, topologyKey: x}\n")
    code, _, err = run(*args, "--scheduler-config", str(config))
    assert code == 2 and "defaultConstraints[0].maxSkew must be greater than 0" in err


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        (
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  template:\n    spec:\n"
            "      requirements: [{key: karpenter.sh/capacity-type, operator: Within, values: [spot]}]\n"
            "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
            "NodePool general: spec.template.spec.requirements[0].operator: Unsupported value",
        ),
        (
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec: {role: 5}\n",
            "EC2NodeClass default: spec.role:",
        ),
        (
            yaml.safe_dump(deployment("web", cpu="two")),
            "Deployment web: spec.template.spec.containers[0].resources.requests.cpu:",
        ),
        ("kind: Deployment\nmetadata: {name: web\nspec: [", "bad.yaml: not valid YAML"),
    ],
    ids=["nodepool-field", "ec2nodeclass-field", "cpu-quantity", "not-yaml"],
)
def test_invalid_input_exits_2_naming_the_document_and_field(tmp_path, with_stand_in, documents, expected):
    code, out, err = run("-f", str(WORKING), "-f", write(tmp_path, "bad.yaml", documents))
    assert code == 2
    assert out == ""
    assert expected in err


def test_a_missing_file_exits_2(tmp_path):
    code, _, err = run("-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in err


def test_exit_codes_of_the_real_process():
    """sys.exit(2), not CommandError's 1; reading stdin with -f -."""
    bad = yaml.safe_dump(deployment("web", memory="lots")).encode()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "karpweb.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", "-f", "-"],
        input=bad,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert b"Deployment web: spec.template.spec.containers[0].resources.requests.memory:" in done.stderr


# ------------------------------------------------------------------ end to end with THE solver


def test_the_seed_nodepool_verbatim_leaves_every_pod_unschedulable_naming_instance_family():
    real_solve()
    code, out, err = run("-f", str(NODECLASS), "-f", str(SEED), "-f", str(APP), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["nodeClaims"] == [] and data["totalPricePerHour"] == 0
    assert [entry["pod"] for entry in data["unschedulable"]] == PENDING
    for entry in data["unschedulable"]:
        assert FAMILY in entry["reason"], entry
    assert data["stats"]["pods"] == 17


def test_the_working_variant_places_every_pod_and_the_total_is_the_sum_of_the_claims():
    real_solve()
    code, out, err = run("-f", str(NODECLASS), "-f", str(WORKING), "-f", str(APP), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["unschedulable"] == []
    placed = [pod for claim in data["nodeClaims"] for pod in claim["pods"]]
    assert sorted(placed) == sorted(PENDING) and len(placed) == len(set(placed))
    assert data["totalPricePerHour"] == pytest.approx(sum(claim["pricePerHour"] for claim in data["nodeClaims"]))
    catalog = bundled_catalog("us-east-1")
    for claim in data["nodeClaims"]:
        assert claim["nodePool"] == "general"
        assert claim["instanceTypeOptions"][0] == claim["instanceType"]
        assert len(claim["instanceTypeOptions"]) == len(set(claim["instanceTypeOptions"]))
        labels = catalog.instance_type(claim["instanceType"]).labels
        assert labels[CATEGORY] in {"c", "m", "r"}
        assert labels["karpenter.k8s.aws/instance-size"] not in {"nano", "micro", "small"}
        assert claim["capacityType"] in {"spot", "on-demand"} and claim["zone"].startswith("us-east-1")
    # The table says the same for people.
    code, table, _ = run("-f", str(NODECLASS), "-f", str(WORKING), "-f", str(APP))
    assert code == 0
    total = data["totalPricePerHour"]
    assert f"${total * HOURS_PER_MONTH:,.2f}/month" in table


# ------------------------------------------------------------------ NodeOverlay documents


def savings_plan(adjustment: str = "-27%", weight: int = 10) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "savings-plan"},
        "spec": {
            "weight": weight,
            "requirements": [
                {"key": FAMILY, "operator": "In", "values": ["r7i"]},
                {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            ],
            "priceAdjustment": adjustment,
        },
    }


def test_simulate_reads_nodeoverlays_and_plans_with_their_prices(tmp_path):
    policies = [nodepool("general", requirements=[
        {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": CATEGORY, "operator": "In", "values": ["r"]},
        {"key": ARCH, "operator": "In", "values": ["amd64"]},
    ])]  # fmt: skip
    app = write(tmp_path, "app.yaml", [deployment("cache", 4, cpu="250m", memory="4Gi")])
    code, out, err = run("-f", write(tmp_path, "policies.yaml", policies), "-f", app, "--format", "json")
    assert code == 0, err
    before = json.loads(out)
    listed = before["nodeClaims"][0]
    assert listed["overlays"] == [] and listed["listPricePerHour"] == listed["pricePerHour"]
    assert listed["instanceType"] != "r7i.large"

    code, out, err = run(
        "-f", write(tmp_path, "with-overlay.yaml", [*policies, savings_plan()]), "-f", app, "--format", "json"
    )
    assert code == 0, err
    plan = json.loads(out)
    claim = plan["nodeClaims"][0]
    assert claim["instanceType"] == "r7i.large" and claim["overlays"] == ["savings-plan"]
    assert (claim["pricePerHour"], claim["listPricePerHour"]) == (0.096579, 0.1323)
    assert claim["instanceTypeOptions"][0] == "r7i.large"  # the option order is by effective price
    assert plan["totalPricePerHour"] == pytest.approx(sum(c["pricePerHour"] for c in plan["nodeClaims"]))
    assert plan["totalPricePerHour"] < before["totalPricePerHour"]

    code, out, _ = run("-f", write(tmp_path, "table.yaml", [*policies, savings_plan()]), "-f", app)
    header, first = out.splitlines()[:2]
    assert header.endswith("PODS  LIST $/HOUR  NODEOVERLAYS")
    assert first.split()[-2:] == ["0.1323", "savings-plan"]


def test_an_invalid_nodeoverlay_exits_2_naming_the_document_and_field(tmp_path, with_stand_in):
    code, out, err = run("-f", str(WORKING), "-f", write(tmp_path, "bad.yaml", [savings_plan("27%")]))
    assert code == 2 and out == ""
    assert 'NodeOverlay savings-plan: spec.priceAdjustment: Invalid value: "27%"' in err


def static_node(name: str, pool: str = "system") -> dict:
    """A node of a static NodePool (an m5.large on demand in us-east-1a)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": pool,
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.sh/initialized": "true",
            },
        },
        "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}},
    }


def test_static_nodepools_are_accounted_for_not_skipped(tmp_path):
    """A static NodePool's nodes are counted and take pods; the claims its replicas still want
    (the cheapest type its requirements allow, within limits.nodes) are in the plan and its
    price; pending pods open no claim of it."""
    system = nodepool(
        "system",
        requirements=[
            {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
        ],
        replicas=3,
        limits={"nodes": 4},
    )
    documents = [system, nodepool("general"), static_node("ip-s1"), deployment("web", replicas=2, cpu="250m")]
    code, out, err = run("-f", write(tmp_path, "static.yaml", documents), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    [static] = data["staticNodePools"]
    assert static["nodePool"] == "system" and static["replicas"] == 3 and static["nodes"] == 1
    assert static["remove"] == 0 and static["nodeLimit"] == 4
    assert [c["instanceType"] for c in static["launch"]] == ["m5.large", "m5.large"]
    assert all(c["zone"] == "us-east-1a" and c["capacityType"] == "on-demand" for c in static["launch"])
    assert {c["nodePool"] for c in data["nodeClaims"]} <= {"general"}
    # The static pool's existing node takes the pods (it has room): nothing to launch for them.
    assert {n["name"]: n["pods"] for n in data["existingNodes"]}["ip-s1"] == ["default/web-0", "default/web-1"]
    launched = sum(c["pricePerHour"] for c in data["nodeClaims"]) + sum(c["pricePerHour"] for c in static["launch"])
    assert data["totalPricePerHour"] == pytest.approx(launched)
    assert "NodePool system: static (spec.replicas 3, 1 running)" in err
    code, table, _ = run("-f", write(tmp_path, "static.yaml", documents))
    assert "STATIC NODEPOOL" in table and "and 2 for static NodePools" in table


def test_a_static_nodepool_above_its_replicas_is_scaled_down_in_the_plan(tmp_path):
    system = nodepool("system", replicas=1)
    documents = [system, static_node("ip-s1"), static_node("ip-s2")]
    code, out, err = run("-f", write(tmp_path, "static.yaml", documents), "--format", "json")
    assert code == 0, err
    [static] = json.loads(out)["staticNodePools"]
    assert static["nodes"] == 2 and static["remove"] == 1 and static["launch"] == []
