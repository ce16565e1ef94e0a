"""The whole pipeline with real parts: a Celery worker process (with beat) on a real Redis
broker, the database both processes share, boto3 against the simulated AWS (moto server),
and the simulated cluster. The test only writes pods and reads state, as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from builders import CONSOLIDATE_AT_ONCE, deployment, nodepool, requirement
from django.db import connection

from provisioning.cluster import simulated
from provisioning.models import ClusterNode, ClusterPod, Decision, Disruption, NodeClaim
from provisioning.services import connections
from provisioning.services.policy import apply_manifest

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "my-cluster"  # the simulated AWS seeds subnets and security groups for it
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    """``celery -A karpweb worker --beat`` as ``make run`` starts it, in its own process."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env, self.workdir = env, workdir
        self.log = workdir / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "karpweb", "worker", "--beat"]
        argv += ["--schedule", str(self.workdir / "beat-schedule"), "--loglevel", "INFO", "--concurrency", "2"]
        argv += ["--without-gossip", "--without-mingle"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, no chance to put messages back."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and its pool processes
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def wait_for(condition: Callable[[], bool], timeout: float, worker: Worker, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}\n--- worker log ---\n{worker.tail()}")


@pytest.fixture
def pipeline(simulated_aws, redis_url, clean_redis, tmp_path, monkeypatch, seed_ec2nodeclass):
    # clean_redis: karpweb's keys and Celery's queues cleared, REDIS_URL set.
    simulated_aws.set_insufficient_capacity([])
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(_nodepool(), source="cli")
    env = {
        **os.environ,
        **simulated_aws.env(),
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "KARPWEB_VAR_DIR": str(tmp_path),
        "KARPWEB_CLUSTER_NAME": CLUSTER,
        "KARPWEB_SIM_KUBELET_DELAY_SECONDS": "0.5",
        "KARPWEB_LAUNCH_STUCK_SECONDS": "3",
        "KARPWEB_DEMO_WORKLOAD": "0",
    }
    worker = Worker(env, tmp_path)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        simulated_aws.set_insufficient_capacity([])
        connections.reset()


def _nodepool() -> dict:
    return nodepool(
        requirement("karpenter.sh/capacity-type", "spot", "on-demand"),
        requirement("kubernetes.io/arch", "amd64", "arm64"),
        requirement("karpenter.k8s.aws/instance-category", "c", "m", "r"),
        disruption=CONSOLIDATE_AT_ONCE,
    )


def _submit(*documents: dict) -> list[str]:
    pods, _ = simulated.workload_pods(list(documents))
    return simulated.apply_pods(pods)


def _instances(sim) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"] for i in _describe(sim)}


def _describe(sim) -> list[dict]:
    # Every page: the session's simulated AWS holds the instances of every test before this one.
    pages = boto3.client("ec2", **sim.client_kwargs()).get_paginator("describe_instances").paginate()
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def _fleets(sim) -> list[dict[str, str]]:
    """The tags of every fleet."""
    ec2 = boto3.client("ec2", **sim.client_kwargs())
    return [{t["Key"]: t["Value"] for t in f.get("Tags", [])} for f in ec2.describe_fleets()["Fleets"]]


def _instances_per_claim(sim, since: set[str]) -> dict[str, list[str]]:
    """Instances launched since ``since``, in any state, grouped by their NodeClaim tag."""
    out: dict[str, list[str]] = {}
    for instance in _describe(sim):
        if instance["InstanceId"] in since:
            continue
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        out.setdefault(tags.get("karpenter.sh/nodeclaim", "?"), []).append(instance["InstanceId"])
    return out


def test_200_pods_get_nodes_launched_in_ec2_and_bound(pipeline, simulated_aws):
    before = set(_instances(simulated_aws))
    assert len(_submit(deployment("web", 200))) == 200
    wait_for(lambda: not ClusterPod.objects.filter(node_name="").exists(), 120, pipeline, "all 200 pods bound")
    claims = list(NodeClaim.objects.exclude(instance_id=""))
    assert claims and all(c.state == NodeClaim.State.INITIALIZED for c in claims)
    running = {i for i, state in _instances(simulated_aws).items() if state == "running"} - before
    # Exactly one instance per claim, each known to a claim and tagged with its name.
    assert running == {c.instance_id for c in claims}
    assert _instances_per_claim(simulated_aws, before) == {c.name: [c.instance_id] for c in claims}
    assert ClusterNode.objects.filter(ready=True).count() == len(claims)
    decision = Decision.objects.order_by("started_at").first()
    assert decision is not None and len(decision.pods) >= 1 and decision.claims.exists()


def test_insufficient_capacity_on_the_cheapest_offering_falls_back(pipeline, simulated_aws):
    # Plan without the worker first: which offering would the claim try first?
    from provisioning.scheduling.solver import solve
    from provisioning.services.catalog import load_catalog
    from provisioning.services.simulate import build_snapshot

    documents = [_nodepool(), deployment("solo", 1, cpu="3", memory="6Gi")]
    snapshot, _ = build_snapshot(documents, catalog=load_catalog())
    first = solve(snapshot).claims[0].options[0]
    simulated_aws.set_insufficient_capacity([f"{first.capacity_type}:{first.instance_type}:*"])
    _submit(deployment("solo", 1, cpu="3", memory="6Gi"))
    wait_for(lambda: ClusterPod.objects.filter(node_name="").count() == 0, 90, pipeline, "the pod bound")
    claim = NodeClaim.objects.exclude(instance_id="").get()
    assert (claim.instance_type, claim.capacity_type) != (first.instance_type, first.capacity_type)


def test_a_worker_killed_mid_launch_leaves_exactly_one_instance_per_claim(pipeline, simulated_aws):
    before = set(_instances(simulated_aws))
    # One replica per node (hostname anti-affinity): claims of one shape, launched as a batch.
    apart = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "api"}}}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}
    _submit(deployment("api", 12, cpu="1", memory="2Gi", affinity=affinity))
    # Kill the worker as soon as any claim is being launched.
    wait_for(
        lambda: NodeClaim.objects.filter(state__in=[NodeClaim.State.LAUNCHING, NodeClaim.State.LAUNCHED]).exists(),
        60,
        pipeline,
        "a launch to start",
    )
    pipeline.kill()
    pipeline.start()
    wait_for(
        lambda: not ClusterPod.objects.filter(node_name="").exists(), 120, pipeline, "all pods bound after restart"
    )
    per_claim = _instances_per_claim(simulated_aws, before)
    claims = {c.name: c.instance_id for c in NodeClaim.objects.exclude(instance_id="")}
    # Exactly one instance per NodeClaim, whatever the kill interrupted; none without a claim.
    assert {name: ids for name, ids in per_claim.items() if len(ids) != 1} == {}
    assert {name: ids[0] for name, ids in per_claim.items()} == claims
    # Claims of one shape were launched as a batch: one fleet for the batch, kill or not.
    batches = set(NodeClaim.objects.exclude(launch_batch="").values_list("launch_batch", flat=True))
    assert batches and NodeClaim.objects.exclude(launch_batch="").count() > len(batches)
    fleets = [f for f in _fleets(simulated_aws) if f.get("karpweb/launch-batch") in batches]
    assert len(fleets) == len(batches)


def test_scaling_down_consolidates_and_terminates_nodes_in_ec2(pipeline, simulated_aws):
    template = deployment("web", 1)["spec"]["template"]
    simulated.scale("default", "Deployment", "web", template, 60)
    wait_for(lambda: not ClusterPod.objects.filter(node_name="").exists(), 120, pipeline, "60 pods bound")
    nodes_before = set(ClusterNode.objects.values_list("name", flat=True))
    assert len(nodes_before) >= 2
    simulated.scale("default", "Deployment", "web", template, 4)
    wait_for(
        lambda: Disruption.objects.filter(state=Disruption.State.DONE).exists(),
        180,
        pipeline,
        "a disruption to finish",
    )
    done = Disruption.objects.filter(state=Disruption.State.DONE).first()
    assert done.reason in ("Empty", "Underutilized") and done.explanation
    assert done.savings_per_hour > 0
    wait_for(lambda: not ClusterPod.objects.filter(node_name="").exists(), 60, pipeline, "the 4 pods bound again")
    gone = NodeClaim.objects.filter(state=NodeClaim.State.TERMINATED).exclude(instance_id="")
    assert gone.exists()
    states = _instances(simulated_aws)
    assert all(states[c.instance_id] in ("shutting-down", "terminated") for c in gone)
    assert set(ClusterNode.objects.values_list("name", flat=True)) != nodes_before
