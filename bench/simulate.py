#!/usr/bin/env python3
"""Pods per second through ``manage.py simulate``: manifests in, a verified plan out.

    .venv/bin/python bench/simulate.py                       # upstream-self at 5,000 and 20,000 pods
    .venv/bin/python bench/simulate.py --scenario upstream --sizes 5000
    .venv/bin/python bench/simulate.py --repeat 3            # the best of three of each

The workload is the upstream benchmark mix (``bench/scenarios.py``) as a user applies it: one
NodePool, one EC2NodeClass and a Deployment per distinct pod template, written to a JSON file
(a `kind: List`, as `kubectl get -o json` writes).
Each run calls the ``simulate`` command in this process (``call_command``, JSON output): it
reads the file, expands the Deployments, validates the policies, builds the snapshot, solves,
verifies and writes the plan. Pods/s is over all of that; the solve and verify seconds inside
it are shown apart. Timed in the same run, the reference: the same path with the solver's
upstream-style greedy (``Snapshot.optimize=False``) in place of THE solver. Timing on a shared
machine moves: compare the two columns of one run, not figures of runs an hour apart.

A last column runs the command once as a user does (``manage.py simulate -f FILE --format
json`` in a new process): interpreter, Django and catalog start-up included.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from bench.scenarios import upstream_manifests  # noqa: E402
from provisioning.scheduling import solver as solver_module  # noqa: E402
from provisioning.services import simulate  # noqa: E402


class _Timed:
    """The solver as ``simulate`` calls it, timed; ``greedy`` swaps in upstream's packing."""

    def __init__(self, greedy: bool) -> None:
        self.greedy = greedy
        self.seconds = 0.0

    def __call__(self, snapshot):
        if self.greedy:
            snapshot = replace(snapshot, optimize=False)
        start = time.perf_counter()
        plan = solver_module.solve(snapshot)
        self.seconds = time.perf_counter() - start
        return plan


def _run(path: str, greedy: bool) -> dict:
    """One ``simulate -f path --format json`` in this process."""
    timed = _Timed(greedy)
    original = simulate.default_solver
    simulate.default_solver = lambda: timed
    verify_seconds = [0.0]
    from provisioning.management.commands import simulate as command

    original_verify = command.verify

    def verify(snapshot, plan):
        start = time.perf_counter()
        found = original_verify(snapshot, plan)
        verify_seconds[0] = time.perf_counter() - start
        return found

    command.verify = verify
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    try:
        call_command("simulate", "-f", path, "--format", "json", stdout=out, stderr=err)
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    finally:
        simulate.default_solver = original
        command.verify = original_verify
    total = time.perf_counter() - start
    plan = json.loads(out.getvalue())
    return {
        "seconds": total,
        "solve": timed.seconds,
        "verify": verify_seconds[0],
        "status": status,
        "claims": len(plan["nodeClaims"]),
        "unschedulable": len(plan["unschedulable"]),
        "violations": len(plan["violations"]),
        "cost": plan["totalPricePerHour"],
    }


def _cli(path: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "simulate", "-f", path, "--format", "json"],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("upstream", "upstream-self"), default="upstream-self")
    parser.add_argument("--sizes", default="5000,20000", help="comma-separated pod counts")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest is shown")
    parser.add_argument("--no-cli", action="store_true", help="skip the run in a new process")
    args = parser.parse_args()
    self_selecting = args.scenario == "upstream-self"
    header = (
        f"{'scenario':<22}{'pods':>7}{'pods/s':>9}{'seconds':>9}{'solve s':>9}{'verify s':>10}"
        f"{'greedy pods/s':>15}{'greedy s':>10}{'opt/greedy speed':>18}{'unsched':>9}{'violations':>12}"
        f"{'$/h opt':>9}{'$/h greedy':>11}{'CLI s':>8}"
    )
    print("through manage.py simulate (JSON output), in this process; the reference: the same with the greedy")
    print(header)
    for size in (int(s) for s in args.sizes.split(",") if s):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            items = upstream_manifests(size, self_selecting=self_selecting)
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, handle)
            path = handle.name
        try:
            _run(path, greedy=False)  # warm: catalog and imports, as a long-running process has them
            best = {"opt": None, "greedy": None}
            for _ in range(max(1, args.repeat)):
                for label, greedy in (("opt", False), ("greedy", True)):
                    run = _run(path, greedy)
                    if best[label] is None or run["seconds"] < best[label]["seconds"]:
                        best[label] = run
            opt, greedy = best["opt"], best["greedy"]
            cli = "-" if args.no_cli else f"{_cli(path):.2f}"
            print(
                f"{args.scenario + '-' + str(size):<22}{size:>7,}{size / opt['seconds']:>9,.0f}{opt['seconds']:>9.2f}"
                f"{opt['solve']:>9.2f}{opt['verify']:>10.2f}{size / greedy['seconds']:>15,.0f}"
                f"{greedy['seconds']:>10.2f}{greedy['seconds'] / opt['seconds']:>18.2f}"
                f"{opt['unschedulable']:>9}{opt['violations']:>12}{opt['cost']:>9.2f}{greedy['cost']:>11.2f}{cli:>8}"
            )
        finally:
            os.unlink(path)


if __name__ == "__main__":
    main()
