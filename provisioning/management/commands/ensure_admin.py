"""``manage.py ensure_admin``: create the first admin user once and print its password."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the admin user if no superuser exists, and print its credentials once."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options):
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "Admin user exists (its password was printed on the first run; "
                "reset it with: .venv/bin/python manage.py changepassword admin)"
            )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(f"Created admin user: {username} / {password}"))
