#!/usr/bin/env python3
"""The pipeline end to end: a burst of pods submitted to the simulated cluster, provisioned by
a Celery worker (with beat) over Redis, launched in the simulated AWS, registered by the
simulated kubelet and bound by the simulated scheduler.

    .venv/bin/python bench/pipeline.py                 # 1,000 pods, 1 s idle window, 2 s kubelet delay
    .venv/bin/python bench/pipeline.py --pods 200 --workers 4

Prints:

* pod-to-launch latency: from a pod's submission (its row is written, as ``sim apply`` does)
  to the moment the launch call (CreateFleet) for the NodeClaim it is nominated to reaches
  the EC2 endpoint (as the simulated AWS notes it on arrival); p50, p99 and max over every pod;
* submit-to-bound: from the start of the submission to the moment the last pod is bound;
* where the time goes, from the start of the submission: when the batch window closed and
  how long the provisioning run took (per decision), when the launch tasks started their
  cloud calls (first, median, last; how many tasks, batches among them) and when the last
  claim was launched.

Uses DATABASE_URL and REDIS_URL when set (PostgreSQL and Redis of the machine), else a
fresh SQLite file and the embedded Redis.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CPU = ("100m", "250m", "500m", "1", "1.5")
MEMORY = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")


def deployments(pods: int, seed: int = 42) -> list[dict]:
    """``pods`` replicas over 30 Deployments of the upstream benchmark's request shapes."""
    rng = random.Random(seed)
    shapes = [(c, m) for c in CPU for m in MEMORY]
    counts = [0] * len(shapes)
    for _ in range(pods):
        counts[rng.randrange(len(shapes))] += 1
    out = []
    for i, ((cpu, memory), n) in enumerate(zip(shapes, counts, strict=True)):
        if n:
            out.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": f"app-{i}"},
                    "spec": {
                        "replicas": n,
                        "selector": {"matchLabels": {"app": f"app-{i}"}},
                        "template": {
                            "metadata": {"labels": {"app": f"app-{i}"}},
                            "spec": {
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "i",
                                        "resources": {"requests": {"cpu": cpu, "memory": memory}},
                                    }
                                ]
                            },
                        },
                    },
                }
            )
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker concurrency")
    parser.add_argument("--kubelet-delay", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    from simaws import start_simulated_aws, stop_simulated_aws

    from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port

    workdir = Path(tempfile.mkdtemp(prefix="karpweb-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        sim = start_simulated_aws(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(sim.process)
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            port = free_port()
            procs.append(subprocess.Popen(embedded_redis_argv(port, workdir / "redis"), stdout=subprocess.DEVNULL))
            wait_for_port(port)
            redis_url = f"redis://127.0.0.1:{port}/0"
        env = {
            **os.environ,
            **sim.env(),
            "REDIS_URL": redis_url,
            "KARPWEB_VAR_DIR": str(workdir),
            "KARPWEB_CLUSTER_NAME": "my-cluster",
            "KARPWEB_SIM_KUBELET_DELAY_SECONDS": str(args.kubelet_delay),
            "KARPWEB_DEMO_WORKLOAD": "0",
            "DJANGO_SETTINGS_MODULE": "karpweb.settings",
        }
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("flush", interactive=False, verbosity=0)  # DATABASE_URL's rows of an earlier run
        from provisioning.cluster import simulated
        from provisioning.models import ClusterPod, NodeClaim

        # provision is imported now, as a running watcher has it, not by the burst's pods_pending.
        from provisioning.services import connections, provision
        from provisioning.services.policy import apply_manifest
        from provisioning.tasks import pods_pending

        connections.get_redis().flushdb()
        for document in _policies():
            apply_manifest(document, source="cli")
        argv = [sys.executable, "-m", "celery", "-A", "karpweb", "worker", "--beat"]
        argv += ["--schedule", str(workdir / "beat"), "--loglevel", os.environ.get("LOGLEVEL", "WARNING")]
        argv += ["--concurrency", str(args.workers)]
        argv += ["--without-gossip", "--without-mingle"]
        with open(workdir / "worker.log", "wb") as log:
            procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        wait_until_warm(time.time() + 120)

        pods, _ = simulated.workload_pods(deployments(args.pods))
        started = time.time()
        simulated.apply_pods(pods)
        inserted = time.time()
        pods_pending()
        submitted = time.time()
        last_pod = float(connections.get_redis().get(provision.WINDOW_LAST))  # the window's own clock
        deadline = started + args.timeout
        while time.time() < deadline and ClusterPod.objects.filter(node_name="").exists():
            time.sleep(0.1)
        bound_at = time.time()
        pending = ClusterPod.objects.filter(node_name="").count()

        # When each claim's launch call reached the (simulated) EC2 endpoint: a batch's calls
        # carry the batch's token, a claim launched alone its own uid.
        called: dict[str, float] = {}
        for call in sim.launch_calls():
            token = call["clientToken"]
            called[token] = min(called.get(token, call["at"]), call["at"])
        call_of = {}
        for name, batch, uid in NodeClaim.objects.values_list("name", "launch_batch", "uid"):
            times = [called[t] for t in (batch, str(uid)) if t in called]
            if times:
                call_of[name] = min(times)
        pods_of_call: dict[float, int] = {}
        for name, pods in NodeClaim.objects.values_list("name", "pods"):
            if name in call_of:
                pods_of_call[call_of[name]] = pods_of_call.get(call_of[name], 0) + len(pods)
        latencies = []
        for pod in ClusterPod.objects.all():
            claim = pod.nominated or ""
            # Bound pods forget their nomination; the claim of their node tells.
            if not claim and pod.node_name:
                claim = NodeClaim.objects.filter(node_name=pod.node_name).values_list("name", flat=True).first() or ""
            if claim in call_of:
                latencies.append(call_of[claim] - pod.created_at.timestamp())
        claims = NodeClaim.objects.exclude(instance_id="").count()
        shapes = len(deployments(args.pods))
        print(
            f"pods: {args.pods:,} in {shapes} Deployments, submitted in {submitted - started:.2f} s "
            f"(inserted in {inserted - started:.2f} s)"
        )
        print(
            f"NodeClaims launched: {claims}; worker concurrency {args.workers}; kubelet delay {args.kubelet_delay:g} s"
        )
        if latencies:
            print(
                f"pod-to-launch latency: p50 {statistics.median(latencies):.2f} s, "
                f"p99 {percentile(latencies, 99):.2f} s, max {max(latencies):.2f} s ({len(latencies)} pods)"
            )
        status = "all bound" if not pending else f"{pending} still pending after {args.timeout:g} s"
        print(f"submit to all bound: {bound_at - started:.2f} s ({status})")
        idle = float(os.environ.get("KARPWEB_BATCH_IDLE_SECONDS", "1"))
        print(f"batch window: closed at +{last_pod - started + idle:.2f} s, {idle:g} s after the last pod was noted")
        print_phases(started)
        covered, steps = 0, []
        for at in sorted(pods_of_call)[:8]:
            covered += pods_of_call[at]
            steps.append(f"+{at - started:.2f} s ({covered * 100 // max(1, args.pods)}%)")
        print("launch calls reaching EC2, with the share of pods covered so far:", ", ".join(steps))
        if os.environ.get("KEEP"):
            from collections import Counter

            from provisioning.models import Decision

            print(Counter(NodeClaim.objects.values_list("state", flat=True)), Decision.objects.count(), "decisions")
        return 0 if not pending else 1
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if "sim" in locals():
            stop_simulated_aws(sim.process)
        if os.environ.get("KEEP"):
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def wait_until_warm(deadline: float) -> None:
    """Until the worker has built and shared the catalog and found the EC2NodeClass ready (its
    start-up tasks), so the burst measures the pipeline, not a worker warming up; on a busy
    machine that takes well over the 5 s that suffice on an idle one."""
    from provisioning.models import EC2NodeClass
    from provisioning.services import catalog, connections

    time.sleep(5)
    redis = connections.get_redis()
    while time.time() < deadline:
        shared = redis.exists(catalog.redis_key(os.environ["AWS_REGION"]) + ":version")
        conditions = [c for nc in EC2NodeClass.objects.all() for c in (nc.status or {}).get("conditions", [])]
        if shared and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            time.sleep(1)  # the worker's processes settle after their start-up tasks
            return
        time.sleep(0.5)
    print("warning: the worker did not warm up in time; figures include its start-up")


def print_phases(started: float) -> None:
    """Where the time went, in seconds from ``started``: window, run, launches."""
    from provisioning.models import Decision, NodeClaim

    for decision in Decision.objects.order_by("started_at"):
        t = {k: v for k, v in decision.timings.items() if isinstance(v, int | float)}
        steps = ", ".join(f"{k} {v:.2f}" for k, v in t.items())
        # "verify": the run was read and solved before the window closed, and only checked after.
        how = "prepared before the window closed" if "verify" in t else "read and solved after the window closed"
        print(
            f"decision {decision.pk}: recording began at +{decision.started_at.timestamp() - started:.2f} s, "
            f"{how} ({steps} s); {decision.claims.count()} NodeClaims"
        )
    claims = list(NodeClaim.objects.exclude(launch_started_at=None))
    if not claims:
        return
    starts = sorted({c.launch_started_at.timestamp() - started for c in claims})  # one per launch task
    batches = {c.launch_batch for c in claims} - {""}
    last = max(c.launched_at.timestamp() for c in claims if c.launched_at) - started
    print(
        f"launch tasks: {len(starts)} ({len(batches)} batches); tasks started at +{starts[0]:.2f} s (first), "
        f"+{statistics.median(starts):.2f} s (median), +{starts[-1]:.2f} s (last); last launched at +{last:.2f} s"
    )


def _policies() -> list[dict]:
    import yaml

    documents = list(yaml.safe_load_all((ROOT / "provisioning" / "demo" / "policies.yaml").read_text()))
    for document in documents:
        if document["kind"] == "NodePool":
            document["spec"].pop("limits", None)  # the demo's limits are for a laptop, not a burst
    return documents


if __name__ == "__main__":
    sys.exit(main())
