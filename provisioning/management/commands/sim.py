"""``manage.py sim``: the simulated cluster from the command line.

    manage.py sim apply -f app.yaml        submit workloads (pods go pending; the pipeline takes them)
    manage.py sim delete -f app.yaml       delete their pods
    manage.py sim status --format json     pods (phase, node), nodes (type, price, ready,
                                           instance, deleting) and PodDisruptionBudgets (with
                                           their computed status)
    manage.py sim node NAME --condition Ready=False [--since 31m]
                                           set a node condition, as a kubelet or the node
                                           monitoring agent would (node repair reads them)

NodePool, EC2NodeClass and NodeOverlay documents in the file are applied as policies (THE
validator);
PodDisruptionBudget (policy/v1) documents are stored, and deleted by ``sim delete``.
Exit 2 on invalid input, naming the document and the field.
"""

from __future__ import annotations

import json
import sys
from typing import NoReturn

from django.core.management.base import BaseCommand

from provisioning import crd
from provisioning.cluster import simulated
from provisioning.crd.manifest import load_files
from provisioning.models import ClusterNode, ClusterPod, NodeClaim
from provisioning.services import policy

EXIT_INVALID = 2
PDB_STATUS = ("expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")


class Command(BaseCommand):
    help = "Submit workloads to, delete them from, or show the state of the simulated cluster."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for action in ("apply", "delete"):
            p = sub.add_parser(action, help=f"{action} the workloads of the files")
            p.add_argument("-f", "--filename", action="append", required=True, help="manifest file, or -")
        status = sub.add_parser("status", help="pods, nodes and PodDisruptionBudgets of the simulated cluster")
        status.add_argument("--format", choices=("json", "table"), default="table")
        node = sub.add_parser("node", help="set conditions of a node")
        node.add_argument("name")
        node.add_argument(
            "--condition", action="append", required=True, help="Type=True|False|Unknown, e.g. Ready=False"
        )
        node.add_argument("--since", default="0s", help="how long ago it changed (a duration: 31m); default now")

    def handle(self, *args, action: str, **options):
        if action == "status":
            self._status(options["format"])
            return
        if action == "node":
            self._node(options["name"], options["condition"], options["since"])
            return
        documents = self._read(options["filename"])
        # Every document is checked before anything is written: a bad one further down the
        # file leaves the cluster as it was, and the policies' errors are all said at once.
        problems = self._policy_problems(documents) if action == "apply" else []
        try:
            pods, notes = simulated.workload_pods(documents)
            budgets = simulated.budget_documents(documents)
        except simulated.SubmitError as exc:
            problems.append(str(exc))
        if problems:
            self._invalid("\n".join(problems))
        for note in notes:
            self.stderr.write(note)
        if action == "apply":
            self._apply_policies(documents)
            for key, result in simulated.apply_budgets(budgets):
                self.stdout.write(f"poddisruptionbudget {key} {result}")
            created = simulated.apply_pods(pods)
            if created:
                self._wake_pipeline()
            self.stdout.write(f"{len(created)} pods created, {len(pods) - len(created)} unchanged")
        else:
            for key in simulated.delete_budgets(budgets):
                self.stdout.write(f"poddisruptionbudget {key} deleted")
            self.stdout.write(f"{simulated.delete_pods(pods)} pods deleted")

    def _wake_pipeline(self) -> None:
        """Open the batch window now; without Redis here, the pipeline's sweep finds the
        pods within 5 s anyway."""
        from provisioning.tasks import pods_pending

        try:
            pods_pending()
        except Exception as exc:  # no REDIS_URL in this shell, or Redis down
            self.stderr.write(f"note: the pipeline will find the pods on its next sweep ({exc})")

    def _policy_problems(self, documents: list) -> list[str]:
        problems = []
        for document in _policies(documents):
            try:
                policy.apply_manifest(document, source="cli", dry_run=True)
            except policy.PolicyError as exc:
                problems.append(str(exc))
        return problems

    def _apply_policies(self, documents: list) -> None:
        for document in _policies(documents):
            try:
                policy.apply_manifest(document, source="cli", actor="sim apply")
            except policy.PolicyError as exc:  # checked before; changed since by someone else
                self._invalid(str(exc))

    def _read(self, filenames: list[str]) -> list:
        try:
            return load_files(filenames)
        except crd.ManifestError as exc:
            self._invalid(str(exc))

    def _node(self, name: str, conditions: list[str], since: str) -> None:
        from provisioning.disruption.model import parse_duration

        parsed = []
        for text in conditions:
            kind, _, status = text.partition("=")
            if not kind or status not in ("True", "False", "Unknown"):
                self._invalid(f"--condition {text!r}: expected Type=True|False|Unknown, e.g. Ready=False")
            parsed.append((kind, status))
        try:
            ago = parse_duration(since, "--since", never=False) or 0.0
        except ValueError as exc:
            self._invalid(str(exc))
        try:
            simulated.set_conditions(name, parsed, ago)
        except simulated.SubmitError as exc:
            self._invalid(str(exc))
        self.stdout.write(f"node {name}: " + ", ".join(f"{k}={v}" for k, v in parsed))

    def _status(self, format: str) -> None:
        from provisioning.models import Disruption

        draining = {n for d in Disruption.objects.filter(state=Disruption.State.DRAINING) for n in d.nodes}
        claims = {c.node_name: c for c in NodeClaim.objects.exclude(node_name="")}
        pods = [
            {"name": p.key, "phase": p.phase, "node": p.node_name or None}
            for p in ClusterPod.objects.order_by("namespace", "name")
        ]
        nodes = []
        for n in ClusterNode.objects.order_by("name"):
            claim = claims.get(n.name)
            labels = (n.manifest.get("metadata") or {}).get("labels") or {}
            nodes.append(
                {
                    "name": n.name,
                    "instanceType": labels.get("node.kubernetes.io/instance-type"),
                    "capacityType": labels.get("karpenter.sh/capacity-type"),
                    "zone": labels.get("topology.kubernetes.io/zone"),
                    "instanceId": n.instance_id or None,
                    "pricePerHour": float(claim.price_per_hour) if claim and claim.price_per_hour is not None else None,
                    "ready": n.ready,
                    "deleting": n.name in draining or (claim is not None and claim.state == NodeClaim.State.DELETING),
                }
            )
        pdbs = []
        for budget in simulated.budget_manifests():
            meta, spec, status = budget["metadata"], budget["spec"], budget["status"]
            pdbs.append(
                {
                    "name": f"{meta['namespace']}/{meta['name']}",
                    **{k: spec[k] for k in ("minAvailable", "maxUnavailable") if spec.get(k) is not None},
                    **{k: status[k] for k in PDB_STATUS},
                }
            )
        if format == "json":
            self.stdout.write(json.dumps({"pods": pods, "nodes": nodes, "pdbs": pdbs}, indent=2))
            return
        bound = sum(1 for p in pods if p["node"])
        self.stdout.write(f"pods: {len(pods)} ({bound} bound, {len(pods) - bound} pending)")
        for n in nodes:
            price = f"${n['pricePerHour']:.4f}/h" if n["pricePerHour"] is not None else "-"
            ready = ("Ready" if n["ready"] else "NotReady") + (",Deleting" if n["deleting"] else "")
            columns = (n["name"], n["instanceId"], n["instanceType"], n["capacityType"], n["zone"], price, ready)
            self.stdout.write("  " + "  ".join(str(c) for c in columns))
        if pdbs:
            self.stdout.write(f"poddisruptionbudgets: {len(pdbs)}")
        for b in pdbs:
            self.stdout.write(
                f"  {b['name']}  {b['disruptionsAllowed']} allowed  "
                f"({b['currentHealthy']} healthy of {b['expectedPods']}, {b['desiredHealthy']} desired)"
            )

    def _invalid(self, message: str) -> NoReturn:
        self.stderr.write(f"invalid input: {message}")
        sys.stderr.flush()
        sys.exit(EXIT_INVALID)


def _policies(documents: list) -> list[dict]:
    return [d for d in documents if isinstance(d, dict) and d.get("kind") in crd.KINDS]
