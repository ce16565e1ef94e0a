#!/usr/bin/env python3
"""Capacity of the provisioning run: how long one run takes for a batch of pending pods, on a
cluster that already runs pods, hence how many runs a minute and how many pods a minute the
single provisioning run (one at a time, through its Redis lock) can take; and what a
Prometheus scrape of /metrics costs on that cluster.

    .venv/bin/python bench/capacity.py                          # 2,000 bound pods; batches of 10 .. 5,000
    .venv/bin/python bench/capacity.py --bound 10000 --pods 100 1000 --repeat 5

The run is ``provision.provision_once()`` as the worker calls it: read the cluster (policies,
nodes, bound pods, NodeClaims in flight), solve, write the Decision and its NodeClaims and
queue their launches. The bound pods are placed first the way the pipeline places them
(a run, its claims launched and registered by the simulated kubelet, the pods bound by the
simulated scheduler); each measured batch is then removed again so every batch meets the
same cluster. The batch window (1 s without new pods, 10 s at most) adds latency before a
run, not a limit on runs: pods that arrive during a run open the next window.

Uses DATABASE_URL and REDIS_URL when set (PostgreSQL and Redis of the machine), else a fresh
SQLite file and the embedded Redis.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound", type=int, default=2000, help="pods already running before the batches")
    parser.add_argument("--pods", type=int, nargs="+", default=[10, 100, 1000, 5000], help="batch sizes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port

    workdir = Path(tempfile.mkdtemp(prefix="karpweb-bench-"))
    redis_proc = None
    try:
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            port = free_port()
            redis_proc = subprocess.Popen(embedded_redis_argv(port, workdir / "redis"), stdout=subprocess.DEVNULL)
            wait_for_port(port)
            redis_url = f"redis://127.0.0.1:{port}/0"
        os.environ.update(
            REDIS_URL=redis_url,
            KARPWEB_VAR_DIR=str(workdir),
            KARPWEB_DEMO_WORKLOAD="0",
            DJANGO_SETTINGS_MODULE="karpweb.settings",
            LOG_LEVEL="WARNING",
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return measure(args)
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def measure(args) -> int:
    from django.test import Client
    from pipeline import _policies, deployments

    from provisioning.models import ClusterNode, ClusterPod, Decision, NodeClaim
    from provisioning.services import connections, provision
    from provisioning.services.policy import apply_manifest

    connections.get_redis().flushdb()
    for document in _policies():
        apply_manifest(document, source="cli")
    if args.bound:
        started = time.perf_counter()
        place(deployments(args.bound, seed=1), prefix="running")
        print(
            f"cluster: {ClusterPod.objects.exclude(node_name='').count():,} bound pods on "
            f"{ClusterNode.objects.count()} nodes (placed in {time.perf_counter() - started:.1f} s)"
        )
    scrape = Client()
    print(
        f"\n{'pods/run':>8}  {'claims':>6}  {'run s':>6}  {'snapshot':>8}  {'solve':>6}  {'record':>6}"
        f"  {'runs/min':>8}  {'pods/min':>9}  {'/metrics s':>10}"
    )
    for size in args.pods:
        runs, parts, claims, scrapes = [], [], [], []
        for r in range(args.repeat):
            submit(deployments(size, seed=100 + r), prefix=f"batch{r}")
            started = time.perf_counter()
            decision = provision.provision_once()
            runs.append(time.perf_counter() - started)
            parts.append(decision.timings)
            claims.append(decision.claims.count())
            started = time.perf_counter()
            response = scrape.get("/metrics")
            scrapes.append(time.perf_counter() - started)
            assert response.status_code == 200
            # Back to the same cluster for the next batch.
            NodeClaim.objects.filter(decision=decision).delete()
            ClusterPod.objects.filter(node_name="").delete()
            Decision.objects.filter(pk=decision.pk).delete()
        run = statistics.median(runs)
        snapshot, solve, record = (statistics.median(p[k] for p in parts) for k in ("snapshot", "solve", "record"))
        print(
            f"{size:>8,}  {statistics.median(claims):>6.0f}  {run:>6.2f}  {snapshot:>8.2f}  {solve:>6.2f}"
            f"  {record:>6.2f}  {60 / run:>8.0f}  {60 / run * size:>9,.0f}  {statistics.median(scrapes):>10.2f}"
        )
    print(f"\nmedian of {args.repeat} runs per size; runs/min = 60 / run s; pods/min = runs/min x pods/run")
    return 0


def submit(documents, prefix: str) -> None:
    from provisioning.cluster import simulated

    for document in documents:
        document["metadata"]["name"] = f"{prefix}-{document['metadata']['name']}"
    simulated.apply_pods(simulated.workload_pods(documents)[0])


def place(documents, prefix: str) -> None:
    """Pods as the pipeline leaves them: planned, their claims launched and registered, bound."""
    from builders import mark_launched
    from django.utils import timezone

    from provisioning.cluster import simulated
    from provisioning.scheduling.solver import solve
    from provisioning.services import provision
    from provisioning.services.catalog import load_catalog

    submit(documents, prefix)
    decision = provision.provision_once()
    mark_launched(decision.claims.all(), timezone.now() - timedelta(minutes=5))
    catalog = load_catalog()
    simulated.register_launched(0, catalog.instance_type)
    simulated.bind_pending(solve)


if __name__ == "__main__":
    sys.exit(main())
