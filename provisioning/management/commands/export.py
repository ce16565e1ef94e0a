"""``manage.py export``: NodePools, EC2NodeClasses and NodeOverlays as kubectl's YAML."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS


class Command(BaseCommand):
    help = "Print NodePools, EC2NodeClasses and NodeOverlays as YAML (kubectl get -o yaml style) or JSON."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*", help="only these names")
        parser.add_argument("--kind", choices=sorted(RESOURCE_MODELS), help="only this kind")
        parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
        parser.add_argument(
            "--for-apply",
            action="store_true",
            help="leave out server-set fields (uid, resourceVersion, generation, creationTimestamp, status)",
        )

    def handle(self, *args, names: list[str], kind: str | None, output: str, for_apply: bool, **options):
        kinds = [kind] if kind else ["EC2NodeClass", "NodePool", "NodeOverlay"]
        manifests = []
        for name in kinds:
            queryset = RESOURCE_MODELS[name].objects.order_by("name")
            if names:
                queryset = queryset.filter(name__in=names)
            manifests += [obj.to_manifest(server_fields=not for_apply) for obj in queryset]
        if names and not manifests:
            raise CommandError(f"not found: {', '.join(names)}")
        if output == "json":
            doc = manifests[0] if len(manifests) == 1 else {"apiVersion": "v1", "kind": "List", "items": manifests}
            self.stdout.write(json.dumps(doc, indent=2, sort_keys=True))
        elif manifests:
            self.stdout.write(dump_yaml(manifests), ending="")
