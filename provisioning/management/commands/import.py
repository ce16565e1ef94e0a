"""``manage.py import -f FILE``: apply NodePool, EC2NodeClass and NodeOverlay manifests, as kubectl
apply."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from provisioning import crd
from provisioning.crd.manifest import load_documents
from provisioning.services.policy import Conflict, Invalid, apply_manifest, validate_manifest


class Command(BaseCommand):
    help = "Apply NodePool / EC2NodeClass / NodeOverlay manifests (YAML or JSON; '-' reads stdin). All or nothing."

    def add_arguments(self, parser):
        parser.add_argument("-f", "--filename", action="append", required=True, help="manifest file, or -")
        parser.add_argument("--dry-run", action="store_true", help="validate only; change nothing")
        parser.add_argument("--actor", default="", help="who to record in the audit log")

    def handle(self, *args, filename: list[str], dry_run: bool, actor: str, **options):
        documents = []
        for name in filename:
            text = sys.stdin.buffer.read() if name == "-" else self._read(name)
            try:
                docs = load_documents(text, source=name)
            except crd.ManifestError as exc:
                raise CommandError(str(exc)) from None
            documents += [(name, index, doc) for index, doc in enumerate(docs, start=1)]
        # EC2NodeClasses first, so NodePools in the same files find theirs.
        documents.sort(key=lambda item: item[2].get("kind") != "EC2NodeClass")
        problems = []
        for name, index, doc in documents:
            result = validate_manifest(doc)
            if not result.ok:
                problems.append(f"{name} (document {index}): {result.summary()}")
        if problems:
            raise CommandError("nothing was imported:\n" + "\n".join(problems))
        actor = actor or _default_actor()
        try:
            with transaction.atomic():
                for _name, _index, doc in documents:
                    applied = apply_manifest(doc, source="cli", actor=actor, dry_run=dry_run)
                    for warning in applied.warnings:
                        self.stderr.write(f"Warning: {warning}")
                    kind = crd.kind_of(doc)
                    suffix = " (dry run)" if dry_run else ""
                    self.stdout.write(f"{kind.kind.lower()}.{kind.group}/{applied.obj.name} {applied.action}{suffix}")
        except (Invalid, Conflict) as exc:
            raise CommandError(f"nothing was imported: {exc}") from None

    def _read(self, name: str) -> bytes:
        path = Path(name)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise CommandError(f"{name}: {exc.strerror}") from None


def _default_actor() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "manage.py"
