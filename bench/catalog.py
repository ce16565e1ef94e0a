"""How long the catalog takes to build and how much memory it holds.

    .venv/bin/python bench/catalog.py [--repeat 5]

Prints: the instance types of us-east-1, the time to load the bundled snapshot and to
build every instance type with its offerings from it, the time of a cached call with the
insufficient-capacity marks applied, the time to build from the simulated AWS (a moto
server over HTTP, started here), and the memory the catalog takes (tracemalloc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioning.cloud.catalog import Catalog, snapshot_path  # noqa: E402
from provisioning.cloud.simulated import SimulatedPrices  # noqa: E402
from provisioning.launcher import free_port, wait_for_port  # noqa: E402

REGION = "us-east-1"
SEED_NODECLASS = {
    "amiSelectorTerms": [{"alias": "al2023@latest"}],
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
    "role": "KarpenterNodeRole-my-cluster",
}


def timed(fn, repeat: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def from_snapshot() -> Catalog:
    catalog = Catalog.from_snapshot(snapshot_path(REGION))
    return catalog.with_spot(SimulatedPrices(dict(catalog.on_demand), catalog.zones).spot_prices(), "simulated")


def from_moto(fallback: Catalog) -> tuple[float, Catalog]:
    from provisioning.cloud.aws import AWSCloud, AWSConfig

    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioning.cloud.simulated", "--port", str(port), "--region", REGION],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
        os.environ.update(
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=REGION,
        )
        cloud = AWSCloud(AWSConfig(region=REGION))
        prices = SimulatedPrices(dict(fallback.on_demand), fallback.zones)
        start = time.perf_counter()
        built = Catalog.build(cloud, prices, fallback, on_demand_source="snapshot", spot_source="simulated")
        return time.perf_counter() - start, built
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    load_s, catalog = timed(from_snapshot, args.repeat)
    build_s, types = timed(
        lambda: Catalog.from_snapshot(snapshot_path(REGION)).instance_types(SEED_NODECLASS), args.repeat
    )
    cached_s, _ = timed(
        lambda: catalog.instance_types(SEED_NODECLASS, unavailable=lambda key: key.endswith("a")), args.repeat * 4
    )
    offerings = sum(len(t.offerings) for t in types)

    tracemalloc.start()
    held = from_snapshot()
    held.instance_types(SEED_NODECLASS)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    moto_s, built = from_moto(catalog)

    rows = [
        ("instance types in us-east-1 (catalog)", f"{len(catalog)}"),
        ("  compatible with the seed EC2NodeClass (AL2023)", f"{len(types)} types, {offerings} offerings"),
        ("load the bundled snapshot (+ simulated spot market)", f"{load_s * 1000:.0f} ms"),
        ("snapshot → every type with offerings, cold", f"{build_s * 1000:.0f} ms"),
        ("cached instance_types() with ICE marks applied", f"{cached_s * 1000:.1f} ms"),
        ("build from the simulated AWS (moto over HTTP)", f"{moto_s:.2f} s ({len(built)} types)"),
        ("memory held: catalog + one EC2NodeClass's types", f"{current / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB)"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"catalog benchmark (median of {args.repeat} runs where repeated)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()
