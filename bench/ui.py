#!/usr/bin/env python3
"""Render time of every dashboard page on a large cluster's data in PostgreSQL.

    .venv/bin/python bench/ui.py                       # 10,000 pods, 1,000 nodes, 100,000 decisions
    .venv/bin/python bench/ui.py --rounds 50 --keep    # keep the seeded database for a later run

Seeds a database of its own (``karpweb_bench``, or ``--db-name``, on the PostgreSQL of
DATABASE_URL, by default postgres://postgres@127.0.0.1:5432) with 10,000 pods (9,000 bound,
1,000 pending, a tenth of those unschedulable; in 20 namespaces, nine in ten labelled with one
of 12 teams), 1,000 live nodes and their NodeClaims, 9,000 NodeClaims of the past 30 days,
100,000 decisions, 2,000 disruptions, and 30 days of the allocation record (every bucket of
every resolution, split as the live nodes are now, give or take a fifth); then renders each
page ``--rounds`` times through Django's test client as a signed-in editor (the whole Django
stack: middleware, session, templates; no network) and prints p50 and p95 per page, and the
time one allocation sample of the whole cluster takes (the beat's minute task; rolled back).
Target: p95 under 150 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DB_NAME = "karpweb_bench"
TYPES = [
    ("m5.xlarge", "0.192", "3920m", "14Gi"),
    ("c6g.large", "0.068", "1930m", "3Gi"),
    ("r6i.2xlarge", "0.504", "7910m", "58Gi"),
]


def bench_database_url(base: str, name: str = DB_NAME) -> str:
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))


def ensure_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", "", ""))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def seed(pods: int, nodes: int, decisions: int, history: int, disruptions: int) -> None:
    from django.db import connection, transaction
    from django.utils import timezone
    from uipages import pod_manifest

    from provisioning.models import AllocationBucket, ClusterNode, ClusterPod, Decision, Disruption, NodeClaim, NodePool
    from provisioning.services.policy import apply_manifest

    if Decision.objects.count() >= decisions and ClusterPod.objects.count() >= pods:
        print("using the database seeded by an earlier run (--fresh seeds it again)")
        seed_allocation(rng=random.Random(7))
        return
    started = time.perf_counter()
    rng = random.Random(7)
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            for table in (ClusterPod, ClusterNode, NodeClaim, Decision, Disruption, AllocationBucket):
                cursor.execute(f"TRUNCATE {table._meta.db_table} CASCADE")
        seed_dir = ROOT / "tests" / "fixtures" / "seed"
        import yaml

        if not NodePool.objects.exists():
            apply_manifest(yaml.safe_load((seed_dir / "ec2nodeclass.yaml").read_text()), source="cli")
            apply_manifest(yaml.safe_load((seed_dir / "nodepool.yaml").read_text()), source="cli")
        pools = ["general", "batch", "gpu"]
        # Decisions: 100,000 over 30 days, each with a few pods; the newest planned the live nodes.
        Decision.objects.bulk_create(
            (
                Decision(
                    pods=[f"ns{i % 20}/app-{i}-{k}" for k in range(rng.randint(1, 12))],
                    unschedulable=[{"pod": f"ns{i % 20}/big-{i}", "reason": "no instance type has 512 cpu"}]
                    if i % 50 == 0
                    else [],
                    timings={"snapshot": 0.02, "solve": round(rng.uniform(0.01, 0.4), 4), "record": 0.01},
                    catalog_version="us-east-1 2026-07-20",
                    total_price_per_hour=Decimal("0.192"),
                    unavailable={"spot:m5.xlarge:us-east-1b": "InsufficientInstanceCapacity"} if i % 10 == 0 else {},
                )
                for i in range(decisions)
            ),
            batch_size=5000,
        )
        Decision.objects.update(started_at=now)  # then spread over 30 days in one statement
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Decision._meta.db_table} SET started_at = now() - (id % 43200) * interval '1 minute'"
            )
        decision_ids = list(Decision.objects.order_by("-started_at").values_list("id", flat=True)[: nodes + history])
        claims = []
        for i in range(nodes + history):
            instance_type, price, _, _ = TYPES[i % len(TYPES)]
            live = i < nodes
            launched = now - timedelta(minutes=rng.randint(5, 30 * 24 * 60))
            claims.append(
                NodeClaim(
                    name=f"{pools[i % 3]}-{i:06x}",
                    nodepool_name=pools[i % 3],
                    nodeclass_name="default",
                    state=NodeClaim.State.INITIALIZED if live else NodeClaim.State.TERMINATED,
                    instance_id=f"i-{i:017x}",
                    instance_type=instance_type,
                    zone=f"us-east-1{'abc'[i % 3]}",
                    capacity_type="spot" if i % 4 else "on-demand",
                    price_per_hour=Decimal(price),
                    node_name=f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}.ec2.internal",
                    launched_at=launched,
                    registered_at=launched + timedelta(seconds=40),
                    initialized_at=launched + timedelta(seconds=60),
                    deleted_at=None if live else min(now, launched + timedelta(hours=rng.randint(1, 72))),
                    decision_id=decision_ids[i],
                    pods=[f"ns{i % 20}/app-{i}-0"],
                    why=f"{instance_type} is the cheapest of 60 instance types that hold its pods",
                    alternatives=[
                        {"instanceType": t, "capacityType": "spot", "zone": "us-east-1a", "price": float(p) * 1.1}
                        for t, p, _, _ in TYPES
                    ],
                    launch_options=[{"instanceType": instance_type, "zone": "us-east-1a", "capacityType": "spot"}] * 20,
                )
            )
        NodeClaim.objects.bulk_create(claims, batch_size=2000)
        live_claims = claims[:nodes]
        ClusterNode.objects.bulk_create(
            (
                ClusterNode(
                    name=c.node_name,
                    nodeclaim=c.name,
                    nodepool=c.nodepool_name,
                    instance_id=c.instance_id,
                    ready=True,
                    disruption_note="not a candidate: consolidateAfter 5m not reached",
                    manifest={
                        "metadata": {"name": c.node_name},
                        "status": {
                            "allocatable": {
                                "cpu": TYPES[i % len(TYPES)][2],
                                "memory": TYPES[i % len(TYPES)][3],
                                "pods": "58",
                            }
                        },
                    },
                )
                for i, c in enumerate(live_claims)
            ),
            batch_size=2000,
        )
        rows = []
        for i in range(pods):
            bound = i < pods * 9 // 10
            team = {"team": f"team-{i % 12}"} if i % 10 else {}
            manifest = pod_manifest(
                f"app-{i}", f"ns{i % 20}", cpu=rng.choice(["250m", "500m", "1"]), memory="1Gi", labels=team
            )
            rows.append(
                ClusterPod(
                    namespace=f"ns{i % 20}",
                    name=f"app-{i}",
                    manifest=manifest,
                    phase=ClusterPod.Phase.RUNNING if bound else ClusterPod.Phase.PENDING,
                    node_name=live_claims[i % nodes].node_name if bound else "",
                    unschedulable_reason="" if bound or i % 10 else "no instance type of NodePool general fits",
                    owner=f"Deployment/app-{i % 300}",
                    **ClusterPod.request_columns(manifest),
                )
            )
        ClusterPod.objects.bulk_create(rows, batch_size=2000)
        Disruption.objects.bulk_create(
            (
                Disruption(
                    reason=rng.choice(["Empty", "Underutilized", "Drifted"]),
                    nodes=[claims[nodes + i].node_name],
                    nodeclaims=[claims[nodes + i].name],
                    replacement_plan=[{"instanceType": "c6g.large", "capacityType": "spot", "price": 0.03}],
                    savings_per_hour=Decimal("0.05"),
                    explanation="replace with a cheaper c6g.large",
                    state="done",
                )
                for i in range(disruptions)
            ),
            batch_size=2000,
        )
    seed_allocation(rng)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"seeded in {time.perf_counter() - started:.1f} s")


def seed_allocation(rng: random.Random) -> None:
    """30 days of the allocation record as the beat would have left it (each resolution for
    as long as it is kept, at most the 30 days): the split of the live nodes now, each bucket
    give or take a fifth. Skipped when a record is there already."""
    from django.db import transaction
    from django.utils import timezone

    from provisioning.models import Allocation, AllocationBucket
    from provisioning.services import allocation

    if AllocationBucket.objects.exists():
        return
    now = timezone.now()
    keys = allocation.label_keys()
    rates = allocation.allocate(*allocation.current(now, keys), keys)
    with transaction.atomic():
        for resolution in allocation.RESOLUTIONS:
            length = resolution.seconds
            first = math.floor((now - min(resolution.keep, timedelta(days=30))).timestamp() / length) * length
            starts = range(int(first), int(now.timestamp()), length)
            buckets = AllocationBucket.objects.bulk_create(
                (
                    AllocationBucket(
                        resolution=length,
                        start=datetime.fromtimestamp(start, UTC),
                        seconds=float(length),
                        sampled_at=datetime.fromtimestamp(start + length, UTC),
                    )
                    for start in starts
                ),
                batch_size=2000,
            )
            Allocation.objects.bulk_create(
                (
                    Allocation(bucket=bucket, by=by, name=name, cost=rate * rng.uniform(0.8, 1.2) * length / 3600)
                    for bucket in buckets
                    for (by, name), rate in rates.items()
                ),
                batch_size=5000,
            )


def pages() -> list[tuple[str, str, dict]]:
    from django.utils import timezone

    from provisioning.models import Decision, NodeClaim

    month_ago = quote((timezone.now() - timedelta(days=30)).isoformat())
    decision = Decision.objects.order_by("-started_at").first()
    claim = NodeClaim.objects.filter(state=NodeClaim.State.INITIALIZED).order_by("-created_at").first()
    htmx = {"HX-Request": "true"}
    out = [
        ("overview", "/", {}),
        ("overview (live part)", "/", htmx),
        ("pending pods", "/pods/", {}),
        ("pending pods (live part)", "/pods/", htmx),
        ("pending pods, one namespace", "/pods/?namespace=ns3", {}),
        ("decisions", "/decisions/", {}),
        ("decisions, page 500", "/decisions/?page=500", {}),
        ("decision", f"/decisions/{decision.pk}/", {}),
        ("nodes", "/nodes/", {}),
        ("nodes, spot of one NodePool", "/nodes/?nodepool=general&capacity_type=spot", {}),
        ("node", f"/nodes/{claim.name}/", {}),
        ("disruptions", "/disruptions/", {}),
        ("spend, 24 h", "/spend/", {}),
        ("spend, 30 d", "/spend/?range=30d", {}),
        ("spend, 30 d CSV", "/spend/?range=30d&format=csv", {}),
        ("spend, 24 h by team", "/spend/?by=label:team", {}),
        ("spend, 7 d by team (live part)", "/spend/?range=7d&by=label:team", htmx),
        ("spend API, 30 d by namespace", f"/api/v1/spend/?by=namespace&step=6h&from={month_ago}", {}),
        ("policies", "/policies/", {}),
        ("policy", "/policies/NodePool/general/", {}),
        ("policy edit form", "/policies/NodePool/general/edit/", {}),
        ("what-if form", "/whatif/", {}),
    ]
    return out


def measure(rounds: int) -> list[tuple[str, float, float]]:
    from django.contrib.auth.models import Group, User
    from django.test import Client

    # An editor: it reads every page a viewer reads, and the policy editor too.
    user, _ = User.objects.get_or_create(username="bench-editor")
    user.groups.add(Group.objects.get(name="editor"))
    client = Client()
    client.force_login(user)
    results = []
    for name, path, headers in pages():
        response = client.get(path, headers=headers)  # warm caches the way a running server has them
        if response.status_code != 200:
            raise SystemExit(f"{path}: HTTP {response.status_code}")
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            client.get(path, headers=headers)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        results.append((name, statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]))
    return results


def sample_times(rounds: int) -> tuple[float, float]:
    """p50 and p95 of one allocation sample of the whole cluster, each rolled back."""
    from django.db import transaction
    from django.utils import timezone

    from provisioning.services import allocation

    times = []
    for i in range(rounds + 1):
        with transaction.atomic():
            started = time.perf_counter()
            allocation.record(timezone.now() + timedelta(minutes=i))
            if i:  # the first warms up
                times.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=9_000, help="NodeClaims of the past 30 days, gone now")
    parser.add_argument("--disruptions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--fresh", action="store_true", help="seed again even if an earlier run left data")
    parser.add_argument("--db-name", default=DB_NAME, help="the database to seed (created if missing)")
    args = parser.parse_args()

    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"), args.db_name)
    ensure_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")
    os.environ.setdefault("KARPWEB_VAR_DIR", str(ROOT / "var"))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.ALLOWED_HOSTS = ["testserver"]
    call_command("migrate", verbosity=0)
    if args.fresh:
        from provisioning.models import Decision

        Decision.objects.all().delete()
    seed(args.pods, args.nodes, args.decisions, args.history, args.disruptions)
    print(f"PostgreSQL {url}; {args.rounds} renders per page after one warm-up\n")
    print(f"{'page':<34} {'p50 ms':>8} {'p95 ms':>8}")
    worst = 0.0
    for name, p50, p95 in measure(args.rounds):
        worst = max(worst, p95)
        print(f"{name:<34} {p50:>8.1f} {p95:>8.1f}")
    print(f"\nworst p95: {worst:.1f} ms (target < 150 ms)")
    p50, p95 = sample_times(max(3, args.rounds // 8))
    print(f"allocation sample of the cluster (the beat's minute task): p50 {p50:.1f} ms, p95 {p95:.1f} ms")


if __name__ == "__main__":
    main()
