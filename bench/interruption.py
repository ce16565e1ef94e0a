#!/usr/bin/env python3
"""Spot interruptions end to end, and the interruption queue's throughput.

    .venv/bin/python bench/interruption.py                  # both parts
    .venv/bin/python bench/interruption.py --part replace   # 10 spot nodes interrupted
    .venv/bin/python bench/interruption.py --part replace --pdb 20%   # ... their pods under a PDB
    .venv/bin/python bench/interruption.py --part queue --messages 5000

**replace**: 200 pods on 10 spot nodes, provisioned by a Celery worker (with beat) over Redis in
the simulated AWS (2 s simulated kubelet start). Then a spot interruption warning for each of the
10 instances through the simulated AWS (``POST /_karpweb/interrupt``: the EventBridge event,
routed by the rule into the SQS queue), read by ``manage.py interruptions``. Prints, from the
warning: when the replacements' CreateFleet calls reached EC2 (first, last), when every pod ran
again on another node, and, once the simulated AWS has ended the interrupted instances (120 s
after the warning, as EC2 does), how many pods were lost (not running). Beside it, the same
provisioning of 200 pending pods from scratch, timed in the same run: how long the pipeline
takes when nothing is interrupted, so a slow figure can be told from a slow machine.

**queue**: ``--messages`` mixed messages (spot warnings, rebalance recommendations, scheduled
changes, state changes, no-ops, a few that do not parse; for instances this cluster does not
own, as upstream's benchmark sends them) put in a queue of their own and drained by one
consumer process; messages per second. Then the same again with the consumer killed (SIGKILL)
mid-run and a second one started: every message is still handled and deleted (the killed
one's batch comes back after the 20 s visibility timeout), the redeliveries counted.

Uses DATABASE_URL and REDIS_URL when set, else a fresh SQLite file and the embedded Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

NODES, PODS = 10, 200
INSTANCE_TYPE = "m5.2xlarge"
# 20 of these fit an m5.2xlarge (7,910m allocatable), 21 do not: 10 nodes for 200 pods.
POD_CPU, POD_MEMORY = "380m", "512Mi"


def policies() -> list[dict]:
    nodeclass = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-my-cluster",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        },
    }
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "spot"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
                    ],
                }
            },
            # Nothing consolidated while the figure is taken.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h"},
        },
    }
    return [nodeclass, pool]


def deployment(name: str, replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}}}
                    ]
                },
            },
        },
    }


class Platform:
    """The simulated AWS, Redis, a database, a Celery worker with beat, the consumer."""

    def __init__(self, args) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="karpweb-bench-"))
        self.procs: list[subprocess.Popen] = []
        self.consumers: list[subprocess.Popen] = []

    def start(self) -> None:
        from simaws import start_simulated_aws

        from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port

        self.sim = start_simulated_aws(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(self.sim.process)
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            port = free_port()
            proc = subprocess.Popen(embedded_redis_argv(port, self.workdir / "redis"), stdout=subprocess.DEVNULL)
            self.procs.append(proc)
            wait_for_port(port)
            redis_url = f"redis://127.0.0.1:{port}/0"
        self.env = {
            **os.environ,
            **self.sim.env(),
            "REDIS_URL": redis_url,
            "KARPWEB_VAR_DIR": str(self.workdir),
            "KARPWEB_CLUSTER_NAME": "my-cluster",
            "KARPWEB_SIM_KUBELET_DELAY_SECONDS": str(self.args.kubelet_delay),
            "KARPWEB_DEMO_WORKLOAD": "0",
            "KARPWEB_INTERRUPTION_QUEUE": "my-cluster",
            "DJANGO_SETTINGS_MODULE": "karpweb.settings",
        }
        os.environ.update(self.env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("flush", interactive=False, verbosity=0)
        from provisioning.services import connections

        connections.get_redis().flushdb()

    def start_worker(self) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "karpweb", "worker", "--beat"]
        argv += ["--schedule", str(self.workdir / "beat"), "--loglevel", os.environ.get("LOGLEVEL", "WARNING")]
        argv += ["--concurrency", str(self.args.workers), "--without-gossip", "--without-mingle"]
        log = open(self.workdir / "worker.log", "ab")  # noqa: SIM115 (closed with the process)
        self.procs.append(subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def start_consumer(self, queue: str) -> subprocess.Popen:
        argv = [sys.executable, str(ROOT / "manage.py"), "interruptions", "--queue", queue]
        log = open(self.workdir / f"consumer-{len(self.consumers)}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.consumers.append(proc)
        self.procs.append(proc)
        return proc

    def stop_consumers(self) -> None:
        for proc in self.consumers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)

    def stop(self) -> None:
        from simaws import stop_simulated_aws

        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if hasattr(self, "sim"):
            stop_simulated_aws(self.sim.process)
        if os.environ.get("KEEP"):
            print(f"kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def client(self, service: str):
        import boto3

        return boto3.client(service, **self.sim.client_kwargs())


# ------------------------------------------------------------------ part 1: replacing interrupted nodes


def running_on_new_nodes(old: set[str]) -> tuple[int, int]:
    from provisioning.models import ClusterPod

    pods = list(ClusterPod.objects.values_list("node_name", "phase"))
    again = sum(1 for node, phase in pods if node and node not in old and phase == "Running")
    return again, len(pods)


def provision_from_scratch(platform: Platform, name: str, replicas: int, timeout: float) -> float | None:
    """Submit ``replicas`` pods and wait until every one runs: seconds, or None on timeout."""
    from provisioning.cluster import simulated
    from provisioning.models import ClusterPod
    from provisioning.tasks import pods_pending

    pods, _ = simulated.workload_pods([deployment(name, replicas)])
    started = time.time()
    simulated.apply_pods(pods)
    pods_pending()
    mine = ClusterPod.objects.filter(manifest__metadata__labels__app=name)
    while time.time() - started < timeout:
        if mine.filter(phase="Running").exclude(node_name="").count() == replicas:
            return time.time() - started
        time.sleep(0.1)
    return None


def part_replace(platform: Platform) -> bool:
    import requests

    from provisioning.models import ClusterNode, ClusterPod, Interruption, NodeClaim
    from provisioning.services.policy import apply_manifest

    args = platform.args
    for document in policies():
        apply_manifest(document, source="cli")
    if args.pdb:
        from provisioning.cluster import simulated

        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": args.pdb, "selector": {"matchLabels": {"app": "web"}}},
        }
        simulated.apply_budgets(simulated.budget_documents([budget]))
        print(f"the pods have a PodDisruptionBudget: maxUnavailable {args.pdb}")
    platform.start_worker()
    platform.start_consumer("my-cluster")
    wait_until_warm(time.time() + 120)
    baseline = provision_from_scratch(platform, "web", PODS, args.timeout)
    if baseline is None:
        print(f"the {PODS} pods were not all running after {args.timeout:g} s; no figure")
        return False
    nodes = list(ClusterNode.objects.all())
    old = {n.name for n in nodes}
    instances = [n.instance_id for n in nodes]
    per_node = sorted(ClusterPod.objects.filter(node_name__in=old).values_list("node_name", flat=True))
    print(
        f"reference, same run: {PODS} pending pods provisioned from scratch in {baseline:.2f} s "
        f"onto {len(nodes)} {INSTANCE_TYPE} spot nodes ({len(per_node) // max(1, len(nodes))} pods each)"
    )
    time.sleep(2)
    warned = time.time()
    answer = requests.post(
        f"{platform.sim.endpoint_url}/_karpweb/interrupt",
        json={"instanceIds": instances, "kind": "spot-interruption"},
        timeout=30,
    )
    answer.raise_for_status()
    all_running = None
    while time.time() - warned < args.timeout:
        again, total = running_on_new_nodes(old)
        if again == total == PODS:
            all_running = time.time() - warned
            break
        time.sleep(0.1)
    fleets = sorted(c["at"] - warned for c in platform.sim.launch_calls() if c["at"] >= warned)
    handled = Interruption.objects.filter(kind="spot_interrupted").exclude(nodeclaim="")
    received = sorted(r.received_at.timestamp() - warned for r in handled)
    print(
        f"{len(instances)} spot interruption warnings ({PODS} pods) sent through EventBridge at +0.00 s; "
        f"handled from the queue at +{received[0]:.2f} .. +{received[-1]:.2f} s ({len(received)} messages)"
        if received
        else f"{len(instances)} spot interruption warnings sent; none handled within {args.timeout:g} s"
    )
    if fleets:
        print(
            f"warning to the replacements' CreateFleet: first +{fleets[0]:.2f} s, last +{fleets[-1]:.2f} s "
            f"({len(fleets)} launch calls)"
        )
    if all_running is not None:
        print(f"warning to every pod running again on new nodes: {all_running:.2f} s (target: within 60 s)")
    else:
        again, total = running_on_new_nodes(old)
        print(f"after {args.timeout:g} s only {again} of {total} pods run on new nodes")
    if args.skip_termination:
        return all_running is not None
    # The simulated AWS ends the instances 120 s after the warning, whatever was done.
    ec2 = platform.client("ec2")
    deadline = warned + 180
    while time.time() < deadline:
        states = {
            i["State"]["Name"]
            for r in ec2.describe_instances(InstanceIds=instances)["Reservations"]
            for i in r["Instances"]
        }
        if states <= {"terminated"}:
            break
        time.sleep(2)
    ended = time.time() - warned
    time.sleep(5)
    how = "by karpweb once drained" if ended < 115 else "by EC2 at the end of the notice"
    running = ClusterPod.objects.filter(phase="Running").exclude(node_name="").exclude(node_name__in=old).count()
    lost = PODS - running
    gone = NodeClaim.objects.filter(instance_id__in=instances, state=NodeClaim.State.TERMINATED).count()
    print(
        f"the interrupted instances were terminated {how} by +{ended:.0f} s ({gone} NodeClaims terminated); "
        f"pods lost: {lost} of {PODS}"
    )
    return all_running is not None and lost == 0


def wait_until_warm(deadline: float) -> None:
    from pipeline import wait_until_warm as warm

    warm(deadline)


# ------------------------------------------------------------------ part 2: throughput


def mixed_messages(count: int, seed: int = 7) -> list[str]:
    """Upstream's benchmark mix, for instances nobody owns: every kind, a few no-ops and bodies
    that do not parse."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        iid = f"i-{rng.getrandbits(60):015x}"
        roll = rng.random()
        if roll < 0.01:
            out.append("{not an event " + str(i))
            continue
        if roll < 0.35:
            source, kind, detail = "aws.ec2", "EC2 Spot Instance Interruption Warning", {"instance-id": iid}
            detail["instance-action"] = "terminate"
        elif roll < 0.55:
            source, kind, detail = "aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": iid}
        elif roll < 0.75:
            state = rng.choice(["stopping", "stopped", "shutting-down", "terminated", "running"])
            source, kind = "aws.ec2", "EC2 Instance State-change Notification"
            detail = {"instance-id": iid, "state": state}
        else:
            source, kind = "aws.health", "AWS Health Event"
            detail = {
                "service": "EC2",
                "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "affectedEntities": [{"entityValue": iid}],
            }
        out.append(
            json.dumps(
                {
                    "version": "0",
                    "id": str(uuid.uuid4()),
                    "detail-type": kind,
                    "source": source,
                    "account": "123456789012",
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "region": "us-east-1",
                    "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{iid}"],
                    "detail": detail,
                }
            )
        )
    return out


def fill(sqs, url: str, bodies: list[str]) -> tuple[float, set[str]]:
    """Put ``bodies`` in the queue; the seconds it took and the messages' ids."""
    started = time.time()
    ids: set[str] = set()
    for start in range(0, len(bodies), 10):
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        ids |= {m["MessageId"] for m in answer.get("Successful", [])}
    return time.time() - started, ids


def left(sqs, url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


def drain(platform: Platform, name: str, count: int, *, kill_after: int | None = None) -> dict:
    from provisioning.models import Interruption

    sqs = platform.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "3600"})["QueueUrl"]
    filled, sent = fill(sqs, url, mixed_messages(count, seed=hash(name) & 0xFFFF))
    started = time.time()
    consumer = platform.start_consumer(name)
    killed_at = None
    first_done = None
    while time.time() - started < platform.args.timeout:
        remaining = left(sqs, url)
        done = count - remaining
        if first_done is None and done > 0:
            first_done = time.time() - started
        if kill_after is not None and killed_at is None and done >= kill_after:
            consumer.send_signal(signal.SIGKILL)
            consumer.wait()
            killed_at = time.time() - started
            platform.start_consumer(name)
        if remaining == 0:
            break
        time.sleep(0.05)
    finished = time.time() - started
    for proc in platform.consumers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in platform.consumers:
        if proc.poll() is None:
            proc.wait(timeout=60)
    rows = Interruption.objects.filter(source="queue", message_id__in=sent)
    messages = rows.values("message_id").distinct().count()
    deleted = rows.filter(deleted=True).values("message_id").distinct().count()
    redelivered = rows.filter(deliveries__gt=1).values("message_id").distinct().count()
    return {
        "filled": filled,
        "seconds": finished,
        "first": first_done,
        "left": left(sqs, url),
        "messages": messages,
        "deleted": deleted,
        "redelivered": redelivered,
        "killed_at": killed_at,
    }


def bare_drain(platform: Platform, count: int) -> tuple[float, int]:
    """The reference, timed in the same run: the same queue calls (ReceiveMessage of 10, a
    DeleteMessage each, 10 at a time) with no handling, so the figure above it can be told
    from what the simulated SQS itself costs on this machine now."""
    from concurrent.futures import ThreadPoolExecutor

    from provisioning.services.cloud import get_cloud

    sqs = platform.client("sqs")
    name = f"bench-bare-{uuid.uuid4().hex[:6]}"
    url = sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "3600"})["QueueUrl"]
    fill(sqs, url, mixed_messages(count))
    queue = get_cloud().interruption_queue(name)
    deleted = 0
    started = time.time()
    with ThreadPoolExecutor(10) as pool:
        while batch := queue.receive(10, 1, 20):
            deleted += sum(1 for _ in pool.map(queue.delete, batch))
    return time.time() - started, deleted


def part_queue(platform: Platform) -> bool:
    args = platform.args
    platform.stop_consumers()  # the first part's, which holds the lead
    seconds, deleted = bare_drain(platform, args.messages)
    print(
        f"reference, same run: {deleted:,} messages received and deleted with no handling in {seconds:.1f} s: "
        f"{deleted / seconds:,.0f} messages/s (the simulated SQS's own cost)"
    )
    # The consumer's start (Django, the queue URL) is not throughput: time from its first deletion.
    result = drain(platform, f"bench-{uuid.uuid4().hex[:6]}", args.messages)
    span = result["seconds"] - (result["first"] or 0)
    rate = args.messages / span if span > 0 else float("nan")
    print(
        f"queue: {args.messages:,} mixed messages (put in {result['filled']:.1f} s) drained by one consumer in "
        f"{result['seconds']:.1f} s, {span:.1f} s from its first deletion: {rate:,.0f} messages/s; "
        f"{result['messages']:,} handled, {result['deleted']:,} deleted, {result['left']} left in the queue"
    )
    killed = drain(platform, f"bench-kill-{uuid.uuid4().hex[:6]}", args.messages, kill_after=args.messages // 3)
    print(
        f"queue with the consumer killed (SIGKILL) at +{killed['killed_at'] or 0:.1f} s and another started: "
        f"all drained in {killed['seconds']:.1f} s; {killed['messages']:,} of {args.messages:,} handled, "
        f"{killed['deleted']:,} deleted, {killed['redelivered']} redelivered after the visibility timeout, "
        f"{killed['left']} left in the queue"
    )
    return all(r["left"] == 0 and r["deleted"] == args.messages for r in (result, killed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("replace", "queue", "both"), default="both")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4, help="Celery worker concurrency")
    parser.add_argument("--kubelet-delay", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--pdb", default="", help="a PodDisruptionBudget's maxUnavailable for the pods (e.g. 20%%)")
    parser.add_argument("--skip-termination", action="store_true", help="do not wait for the instances to end")
    args = parser.parse_args()
    platform = Platform(args)
    ok = True
    try:
        platform.start()
        if args.part in ("replace", "both"):
            ok = part_replace(platform) and ok
        if args.part in ("queue", "both"):
            ok = part_queue(platform) and ok
    finally:
        platform.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
