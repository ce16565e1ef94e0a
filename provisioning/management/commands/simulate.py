"""``manage.py simulate -f FILE``: what karpweb would launch for these manifests, as
``terraform plan`` shows what would change.

Reads NodePool, EC2NodeClass, Pod, Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, Node
and Namespace documents (other kinds are skipped with a note on stderr), solves against the
bundled catalog of the region (no network), and prints the plan as a table or as JSON.

With ``--disruption`` it runs the disruption planner instead (emptiness, drift, expiration,
multi- and single-node consolidation, budgets, do-not-disrupt, PodDisruptionBudgets) once
over the cluster the documents describe (Nodes with Karpenter's labels, bound and pending
Pods, workloads, DaemonSets, PodDisruptionBudgets), judging ages against ``--now``, and
prints what it would disrupt and why every node is or is not a candidate. Nothing changes.

Exit status: 0 with a plan (unschedulable pods are part of it), 2 on invalid input (the
message on stderr names the document and the field), 3 when THE verifier finds the plan
breaking a rule (each violation is printed on stderr): a plan karpweb would refuse to launch.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import NoReturn

from django.core.management.base import BaseCommand

from provisioning import crd
from provisioning.crd.manifest import load_files
from provisioning.scheduling.defaults import parse_scheduler_config
from provisioning.scheduling.verify import verify
from provisioning.services.disruptionview import what_if, what_if_table
from provisioning.services.simulate import SimulateError, plan_documents, plan_to_json, plan_to_table

EXIT_INVALID = 2
EXIT_VIOLATIONS = 3


class Command(BaseCommand):
    help = (
        "Plan the NodeClaims for NodePools, EC2NodeClasses and workloads (YAML or JSON; '-' reads stdin) "
        "against the bundled catalog, without launching anything. EC2NodeClasses are assumed to have "
        "subnets in every zone of the region unless --zones says otherwise. "
        "Exit 0 with a plan, 2 on invalid input, 3 when the plan verifier finds a broken rule."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument(
            "-f", "--filename", action="append", required=True, help="manifest file, or - for stdin (repeatable)"
        )
        parser.add_argument("--region", default="us-east-1", help="the region whose bundled catalog to use")
        parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
        parser.add_argument(
            "--zones",
            default="",
            help="comma-separated zones the EC2NodeClasses have subnets in (us-east-1a or a); default: all",
        )
        parser.add_argument(
            "--preference-policy",
            choices=("Respect", "Ignore"),
            help="how preferences count (upstream's PREFERENCE_POLICY; default: the setting)",
        )
        parser.add_argument(
            "--min-values-policy",
            choices=("Strict", "BestEffort"),
            help="whether minValues may be relaxed (upstream's MIN_VALUES_POLICY; default: the setting)",
        )
        parser.add_argument(
            "--disruption",
            action="store_true",
            help="what the disruption planner would do now to the cluster the files describe",
        )
        parser.add_argument(
            "--now",
            metavar="RFC3339",
            help="with --disruption: the time to judge consolidateAfter and expireAfter at (default: now)",
        )
        parser.add_argument(
            "--scheduler-config",
            metavar="FILE",
            help="a document with podTopologySpread.defaultConstraints, as upstream's SCHEDULER_CONFIG",
        )

    def handle(self, *args, filename: list[str], region: str, format: str, zones: str, **options):
        try:
            documents = load_files(filename)
        except crd.ManifestError as exc:
            self._invalid(str(exc))
        if options.get("disruption"):
            self._disruption(documents, region, format, options.get("now"))
            return
        zone_list = [zone for zone in zones.split(",") if zone.strip()] if zones else None
        policies = {
            "preference_policy": options.get("preference_policy"),
            "min_values_policy": options.get("min_values_policy"),
        }
        if options.get("scheduler_config"):
            policies["default_constraints"] = self._scheduler_config(options["scheduler_config"])
        try:
            snapshot, plan, notes = plan_documents(documents, region=region, zones=zone_list, **policies)
        except SimulateError as exc:
            self._invalid(str(exc))
        for note in notes:
            self.stderr.write(note)
        violations = verify(snapshot, plan)
        if format == "json":
            self.stdout.write(json.dumps(plan_to_json(plan, snapshot, violations), indent=2))
        else:
            self.stdout.write(plan_to_table(plan, snapshot), ending="")
        if violations:
            for violation in violations:
                self.stderr.write(f"violation: {violation}")
            sys.stdout.flush()
            sys.stderr.flush()
            sys.exit(EXIT_VIOLATIONS)

    def _disruption(self, documents: list, region: str, format: str, now_text: str | None) -> None:
        from django.conf import settings

        now = datetime.now(UTC)
        if now_text:
            try:
                now = datetime.fromisoformat(now_text.replace("Z", "+00:00"))
            except ValueError:
                self._invalid(f"--now: {now_text!r} is not an RFC 3339 time such as 2026-01-02T03:04:05Z")
            if now.tzinfo is None:
                now = now.replace(tzinfo=UTC)
        try:
            result, notes = what_if(
                [d for d in documents if d is not None],
                now=now,
                region=region,
                spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION,
            )
        except SimulateError as exc:
            self._invalid(str(exc))
        for note in notes:
            self.stderr.write(note)
        if format == "json":
            self.stdout.write(json.dumps(result, indent=2))
        else:
            self.stdout.write(what_if_table(result), ending="")

    def _scheduler_config(self, path: str) -> list[dict]:
        try:
            (document,) = [d for d in load_files([path]) if d is not None] or [None]
            return parse_scheduler_config(document)
        except crd.ManifestError as exc:
            self._invalid(str(exc))
        except ValueError as exc:
            self._invalid(f"{path}: {exc}")

    def _invalid(self, message: str) -> NoReturn:
        self.stderr.write(f"invalid input: {message}" if "\n" not in message else f"invalid input:\n{message}")
        sys.stderr.flush()
        sys.exit(EXIT_INVALID)
