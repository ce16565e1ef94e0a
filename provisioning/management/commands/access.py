"""``manage.py access``: who may call what, as README's Access section shows it (the table in
provisioning/ui/access.py, in Markdown)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from provisioning.ui import access


class Command(BaseCommand):
    help = "Print the access table (every route of each role, its methods and who may call them) in Markdown."

    def handle(self, *args, **options):
        self.stdout.write(access.markdown(), ending="")
