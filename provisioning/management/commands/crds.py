"""``manage.py crds``: write (or check) deploy/crds/ from the validator's schema."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from provisioning.crd.manifest import dump_yaml
from provisioning.crd.render import all_crds

HEADER = "# Rendered by `manage.py crds` from provisioning/crd/; edit the schema there, not here.\n"


class Command(BaseCommand):
    help = "Render the NodePool, EC2NodeClass and NodeOverlay CRDs into deploy/crds/ (or --check they are current)."

    def add_arguments(self, parser):
        parser.add_argument("--out", default=str(settings.BASE_DIR / "deploy" / "crds"))
        parser.add_argument("--check", action="store_true", help="fail if the files are out of date")

    def handle(self, *args, out: str, check: bool, **options):
        folder = Path(out)
        stale = []
        for name, manifest in all_crds().items():
            text = HEADER + dump_yaml([manifest])
            path = folder / name
            if check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
                continue
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            self.stdout.write(f"wrote {path}")
        if stale:
            raise CommandError(f"out of date (run `make crds`): {', '.join(stale)}")
